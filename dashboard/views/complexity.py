"""Complexity against the best value: one point per run (parameters, FLOPs, latency, time per step, time
to converge ... against the best value of the metric its policy watched), each labelled with its run."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from plateau_tracker.dashboard import _api
from plateau_tracker.dashboard._views import best_of

PREFIX = "complexity/"
# Convergence figures the tracker derives for every run, shown next to what the trainer reported.
CONVERGENCE = ("time_to_first_best_s", "time_to_best_s", "time_to_stop_s", "duration_s", "time_per_step_s")
# Preferred first choices of the measure, when present. Time to converge is the time to the first
# evaluation at the best value; a checkpoint kept later at a tie of it (time_to_best_s) is no slower model.
PREFERRED = ("params", "flops_per_sample", "latency_ms_batch1", "time_to_first_best_s")


def figures_of(run: dict[str, Any]) -> tuple[dict[str, float | None], float | None]:
    """A run's numeric figures: its summary (``profile_model``, step timer), the derived convergence
    times, and any ``complexity/*`` keys it logged as metrics; and its best value."""
    reported = _api.guarded(_api.summary, run["id"])
    figures: dict[str, float | None] = {}
    for name, value in reported["summary"].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            figures[name] = float(value)
    convergence = reported["convergence"]
    for name in CONVERGENCE:
        if convergence.get(name) is not None:
            figures[name] = float(convergence[name])
    for key in _api.guarded(_api.keys, run["id"]):
        if key.startswith(PREFIX):
            points = _api.guarded(_api.series, run["id"], key, 4)
            figures.setdefault(key.removeprefix(PREFIX), _api.number(points[-1]["value"]) if points else None)
    best = convergence.get("best_value")
    if best is None:
        _, best = best_of(_api.guarded(_api.decisions, run["id"]))
    return figures, best


st.title("Complexity vs best value")
experiments = _api.guarded(_api.experiments)
if not experiments:
    st.info("No runs yet.")
    st.stop()
project, experiment = st.selectbox("Experiment", experiments, format_func=lambda pe: f"{pe[0]} / {pe[1]}")
rows = []
# The newest 1,000 runs of the experiment: each costs a few requests here (its summary, keys, figures).
chosen_runs = _api.guarded(_api.newest_runs, project, experiment, 1000)
for r in chosen_runs:
    figures, best = figures_of(r)
    if any(name not in CONVERGENCE for name in figures):
        rows.append({"run": f"#{r['id']} {r['name']}", "best": best, **figures})
if not rows:
    st.info(
        "No run of this experiment has reported complexity figures. Call `run.profile_model(model, "
        "example_input)` (parameters, FLOPs, latency, memory) and time steps with `run.step_timer()`; "
        "the Lightning callback does both with `profile=True`."
    )
    st.stop()
frame = pd.DataFrame(rows)
watched = {((r.get("policy") or {}).get("monitor"), (r.get("policy") or {}).get("mode")) for r in chosen_runs}
if len(watched) == 1 and None not in next(iter(watched)):
    monitor, mode = next(iter(watched))
    better = "lower" if mode == "min" else "higher"
    best_title = f"best {monitor} ({better} is better)"
else:
    best_title = "best value of each run's monitored metric"
measures = [c for c in frame.columns if c not in ("run", "best") and pd.api.types.is_numeric_dtype(frame[c])]
default = next((measures.index(m) for m in PREFERRED if m in measures), 0)
measure = st.selectbox("Complexity measure", measures, index=default)
positive = bool((frame[measure].dropna() > 0).all())
base = alt.Chart(frame).encode(
    x=alt.X(f"{measure}:Q", scale=alt.Scale(type="log" if positive else "linear")),
    y=alt.Y("best:Q", scale=alt.Scale(zero=False), title=best_title),
    tooltip=list(frame.columns),
)
points = base.mark_circle(size=120)
labels = base.mark_text(align="left", dx=9, fontSize=11).encode(text="run:N")
st.altair_chart(alt.layer(points, labels), width="stretch")
st.dataframe(frame, hide_index=True)
