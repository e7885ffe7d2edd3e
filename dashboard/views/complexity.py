"""Complexity against accuracy: one point per run (parameters, FLOPs, time per batch ... vs best score)."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from dashboard import _api
from dashboard._views import best_of

PREFIX = "complexity/"

st.title("Complexity vs accuracy")
available = _api.guarded(_api.runs)
experiments = sorted({(r["project"], r["experiment"]) for r in available})
if not experiments:
    st.info("No runs yet.")
    st.stop()
project, experiment = st.selectbox("Experiment", experiments, format_func=lambda pe: f"{pe[0]} / {pe[1]}")
rows = []
for r in (r for r in available if r["project"] == project and r["experiment"] == experiment):
    figures = {}
    for key in _api.guarded(_api.keys, r["id"]):
        if key.startswith(PREFIX):
            points = _api.guarded(_api.series, r["id"], key, 4)
            figures[key.removeprefix(PREFIX)] = _api.number(points[-1]["value"]) if points else None
    _, best = best_of(_api.guarded(_api.decisions, r["id"]))
    if figures:
        rows.append({"run": f"#{r['id']} {r['name']}", "best": best, **figures})
if not rows:
    st.info(
        "No run of this experiment has logged complexity figures (keys under `complexity/`, e.g. "
        "complexity/params, complexity/flops_per_sample, complexity/latency_ms)."
    )
    st.stop()
frame = pd.DataFrame(rows)
measures = [c for c in frame.columns if c not in ("run", "best")]
measure = st.selectbox("Complexity measure", measures)
st.altair_chart(
    alt.Chart(frame)
    .mark_circle(size=120)
    .encode(
        x=alt.X(f"{measure}:Q", scale=alt.Scale(type="log")),
        y=alt.Y("best:Q", scale=alt.Scale(zero=False)),
        tooltip=list(frame.columns),
    ),
    width="stretch",
)
st.dataframe(frame, hide_index=True)
