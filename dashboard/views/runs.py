"""Runs: one row per run of a project/experiment, with the decision that ended it. Refreshes itself."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import _api
from dashboard._views import run_row

st.title("Runs")
everything = _api.guarded(_api.runs)
projects = sorted({r["project"] for r in everything})
if not projects:
    st.info(f"No runs yet on {_api.tracker_url()}. Start one with `sdk.init(...)` or `plateau demo`.")
    st.stop()
left, right = st.columns(2)
project = left.selectbox("Project", projects)
experiments = sorted({r["experiment"] for r in everything if r["project"] == project})
experiment = right.selectbox("Experiment", ["(all)", *experiments])
status = st.multiselect("Status", ["running", "finished", "stopped", "failed", "crashed"])


@st.fragment(run_every="5s")
def table() -> None:
    chosen = _api.guarded(_api.runs, project, None if experiment == "(all)" else experiment)
    rows = [
        run_row(r, _api.guarded(_api.decisions, r["id"]))
        for r in chosen
        if not status or r["status"] in status
    ]
    if not rows:
        st.info("No run matches.")
        return
    frame = pd.DataFrame(rows)
    st.dataframe(
        frame,
        hide_index=True,
        column_config={
            "compute saved": st.column_config.ProgressColumn(min_value=0, max_value=1, format="percent")
        },
    )
    st.caption(f"{len(rows)} runs · open one on the Run page with its id")


table()
