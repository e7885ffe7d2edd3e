"""Plateau dashboard: ``plateau dashboard`` (or ``streamlit run dashboard/app.py``).

It reads everything from the tracker's HTTP API at ``$PLATEAU_URL`` (token: ``$PLATEAU_TOKEN``); with
``$PLATEAU_DASHBOARD_TOKEN`` set, a viewer signs in with it first.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from plateau_tracker.dashboard._access import signed_in
from plateau_tracker.dashboard._api import (
    tracker_url,  # the installed package (pip install -e . in a checkout)
)

HERE = Path(__file__).parent / "views"

st.set_page_config(page_title="Plateau", layout="wide")
if not signed_in():
    st.stop()
st.sidebar.caption(f"Tracker: {tracker_url()}")
st.navigation(
    [
        st.Page(HERE / "runs.py", title="Runs", default=True),
        st.Page(HERE / "run.py", title="Run", url_path="run"),
        st.Page(HERE / "compare.py", title="Compare"),
        st.Page(HERE / "distributed.py", title="Distributed"),
        st.Page(HERE / "complexity.py", title="Complexity"),
    ]
).run()
