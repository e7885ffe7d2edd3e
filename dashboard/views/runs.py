"""Runs: one row per run of a project/experiment, with what ended it and why. Refreshes itself.

One request per refresh: the runs list carries each run's latest decision (a stopped run's is its stop),
so the page no longer asks for every run's decisions every 5 s.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from dashboard import _api
from dashboard._views import run_row, runs_table, stop_decision

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


def _stop_of(run: dict[str, Any]) -> dict[str, Any] | None:
    latest = run.get("decision") or {}
    if latest.get("action") == "stop":
        return latest
    if run.get("stop_step") is None:
        return None
    # A rule stopped it, and a later decision came after the stop: only then ask for its decisions.
    return stop_decision(_api.guarded(_api.decisions, run["id"]))


@st.fragment(run_every="5s")
def table() -> None:
    chosen = _api.guarded(_api.runs, project, None if experiment == "(all)" else experiment)
    rows = [run_row(r, _stop_of(r)) for r in chosen if not status or r["status"] in status]
    if not rows:
        st.info("No run matches.")
        return
    st.html(runs_table(rows))
    st.caption(
        f"{len(rows)} runs · a run's name opens its page · compute saved: the share of the planned steps a "
        "stop left unrun"
    )


table()
