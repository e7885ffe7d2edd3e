"""Runs: one page of a project's runs at a time, newest first, with what ended each run and why. Refreshes
itself.

A refresh costs one request whatever the experiment holds: the page of runs, filtered by the tracker, each
with its latest decision (a stopped run's is its stop). The project and experiment choices come from the
tracker's project list, so the page never reads every run (10,000 runs in an experiment used to take 6 s
to show)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from plateau_tracker.dashboard import _api
from plateau_tracker.dashboard._views import run_row, runs_table, stop_decision

PAGE_SIZE = 100
STATUSES = ["running", "finished", "stopped", "failed", "crashed"]

st.title("Runs")
projects = _api.guarded(_api.projects)
if not projects:
    st.info(
        f"No runs yet on {_api.tracker_url()}. Start one with `plateau_tracker.init(...)` or `plateau demo`."
    )
    st.stop()
left, right = st.columns(2)
project = left.selectbox("Project", [p["name"] for p in projects])
experiments = next(p["experiments"] for p in projects if p["name"] == project)
experiment = right.selectbox("Experiment", ["(all)", *[e["name"] for e in experiments]])
left, right = st.columns(2)
statuses = tuple(left.multiselect("Status", STATUSES))
name = right.text_input("Name contains", max_chars=200).strip() or None

# The page shown is a stack of keyset cursors (None: the newest page). Changing a filter starts again at
# the newest page; within one, live runs arrive on the first page and later pages stay put.
filters = (project, experiment, statuses, name)
if st.session_state.get("runs_filters") != filters:
    st.session_state["runs_filters"] = filters
    st.session_state["runs_cursors"] = [None]
cursors: list[int | None] = st.session_state["runs_cursors"]


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
    page = _api.guarded(
        _api.runs_page,
        project=project,
        experiment=None if experiment == "(all)" else experiment,
        statuses=statuses,
        name=name,
        limit=PAGE_SIZE,
        before=cursors[-1],
    )
    if not page["data"]:
        st.info("No run matches.")
        return
    st.html(runs_table([run_row(r, _stop_of(r)) for r in page["data"]]))
    first = (len(cursors) - 1) * PAGE_SIZE + 1
    newer, older, caption = st.columns([1, 1, 8], vertical_alignment="center")
    newer.button("Newer", disabled=len(cursors) == 1, on_click=cursors.pop)
    older.button("Older", disabled=page["next"] is None, on_click=cursors.append, args=(page["next"],))
    caption.caption(
        f"runs {first:,}-{first + len(page['data']) - 1:,} of {page['count']:,}, newest first · a run's name "
        "opens its page · compute saved: the share of the planned steps a stop left unrun"
    )


table()
