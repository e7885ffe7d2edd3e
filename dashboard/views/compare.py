"""Compare: several runs' curves overlaid, hyperparameters against the best value, and sensitivity."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from plateau_tracker.dashboard import _api
from plateau_tracker.dashboard._views import best_of, curve_chart

st.title("Compare runs")
experiments = _api.guarded(_api.experiments)
if not experiments:
    st.info("No runs yet.")
    st.stop()
project, experiment = st.selectbox("Experiment", experiments, format_func=lambda pe: f"{pe[0]} / {pe[1]}")
runs = _api.guarded(_api.newest_runs, project, experiment, 1000)  # oldest first below, as runs are listed
runs.reverse()
labels = {f"#{r['id']} {r['name']}": r for r in runs}
picked = [labels[label] for label in st.multiselect("Runs", list(labels), default=list(labels)[:5])]
if not picked:
    st.stop()
keys = sorted({k for r in picked for k in _api.guarded(_api.keys, r["id"])})
monitor = (picked[0].get("policy") or {}).get("monitor")
key = st.selectbox("Metric", keys, index=keys.index(monitor) if monitor in keys else 0)
align = st.radio("Align by", ["step", "time"], horizontal=True)
frames = []
for r in picked:
    points = _api.guarded(_api.series, r["id"], key)
    if not points:
        continue
    start = points[0]["wall_time"]
    frames.append(
        pd.DataFrame(
            {
                "step": [p["step"] for p in points],
                "time": [p["wall_time"] - start for p in points],
                "value": [_api.number(p["value"]) for p in points],
                "run": f"#{r['id']} {r['name']}",
            }
        )
    )
if frames:
    st.altair_chart(
        curve_chart(pd.concat(frames), [], log_scale=False, x=align, colour="run"), width="stretch"
    )

st.subheader("Hyperparameters and best value")
rows = []
for r in picked:
    _, best = best_of(_api.guarded(_api.decisions, r["id"]))
    # The best value next to the run, before the hyperparameters: a wide config pushed it off-screen.
    rows.append(
        {
            "run": f"#{r['id']} {r['name']}",
            "best": best,
            **{f"config.{k}": v for k, v in (r.get("config") or {}).items()},
        }
    )
table = pd.DataFrame(rows)
st.dataframe(table, hide_index=True, column_config={"best": st.column_config.NumberColumn(pinned=True)})
sensitivity = []
judged = table.dropna(subset=["best"])
for column in [c for c in table.columns if c.startswith("config.")]:
    groups = judged.groupby(judged[column].astype(str))["best"].mean()
    # Text unique to each run (a name, a path, a tag) is not a hyperparameter whose effect can be read:
    # every "group" is one run, and its spread is just the spread of the runs. (A number unique to each
    # run, the learning rate of a sweep, still is one.)
    labels_only = not pd.api.types.is_numeric_dtype(judged[column]) and len(groups) == len(judged)
    if len(groups) > 1 and not labels_only:
        sensitivity.append(
            {
                "hyperparameter": column[7:],
                "values": len(groups),
                "spread of mean best": float(groups.max() - groups.min()),
            }
        )
if sensitivity:
    st.caption("Sensitivity: how far the mean best value moves across each hyperparameter's values")
    st.dataframe(
        pd.DataFrame(sensitivity).sort_values("spread of mean best", ascending=False), hide_index=True
    )
