"""Who may see the dashboard: anyone who reaches it on loopback, or, when ``$PLATEAU_DASHBOARD_TOKEN`` is
set (``plateau dashboard`` requires one on any other address), whoever gives that token once a session.

The dashboard reads the tracker with its own ``$PLATEAU_TOKEN`` (an operator token shows every project):
a viewer never holds a tracker token.
"""

from __future__ import annotations

import hmac
import os

import streamlit as st

_SIGNED_IN = "plateau_signed_in"


def signed_in() -> bool:
    """True when this session may see the dashboard; otherwise it shows the sign-in form."""
    expected = os.environ.get("PLATEAU_DASHBOARD_TOKEN")
    if not expected or st.session_state.get(_SIGNED_IN):
        return True
    st.title("Plateau")
    given = st.text_input("Dashboard token", type="password", key="plateau_dashboard_token")
    if given and hmac.compare_digest(given.encode(), expected.encode()):
        st.session_state[_SIGNED_IN] = True
        st.rerun()
    if given:
        st.error("That is not this dashboard's token.")
    return False
