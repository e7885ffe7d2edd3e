"""Distributed: per-rank step, compute, sync-wait and transfer times, the straggler, staleness."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from plateau_tracker.dashboard import _api

st.title("Distributed health")
experiments = _api.guarded(_api.experiments)
if not experiments:
    st.info("No runs yet.")
    st.stop()
project, experiment = st.selectbox("Experiment", experiments, format_func=lambda pe: f"{pe[0]} / {pe[1]}")
available = _api.guarded(_api.newest_runs, project, experiment, 1000)
labels = {f"#{r['id']} {r['name']}": r["id"] for r in available}
run_id = labels[st.selectbox("Run (the experiment's newest 1,000)", list(labels))]
health = _api.guarded(_api.health, run_id)
if not health["ranks"]:
    st.info(
        "This run has no distributed figures "
        "(use plateau_tracker.distributed.StepTimer or plateau_tracker.staleness)."
    )
    st.stop()
verdict = health.get("straggler")
if verdict:
    st.warning(verdict["reason"])
else:
    st.success("No straggler: every rank's relative performance is above the bound.")
rows = [
    {
        "rank": r["rank"],
        "reports": r["reports"],
        **{name.removeprefix("dist/"): _api.number(v) for name, v in r["figures"].items()},
    }
    for r in health["ranks"]
]
st.dataframe(pd.DataFrame(rows), hide_index=True)
if health["staleness_histogram"]:
    st.subheader("Staleness (updates by staleness, per worker)")
    bins = [
        {"worker": str(w), "staleness ≥": int(b), "updates": n}
        for w, counts in health["staleness_histogram"].items()
        for b, n in counts.items()
    ]
    st.bar_chart(pd.DataFrame(bins), x="staleness ≥", y="updates", color="worker", stack=False)
if health["alerts"]:
    st.subheader("Alerts")
    st.dataframe(
        pd.DataFrame([{k: a[k] for k in ("step", "rule", "reason")} for a in health["alerts"]]),
        hide_index=True,
    )
