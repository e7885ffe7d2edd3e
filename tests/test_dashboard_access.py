"""Sharing the dashboard safely: it binds loopback by default, refuses any other address without a
sign-in token, and with one set, shows nothing until a viewer gives it (Streamlit's AppTest, real app)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from plateau_tracker.dashboard import _api
from tests._server import free_port

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"


def test_a_dashboard_on_another_address_needs_a_sign_in_token(tmp_path: Path) -> None:
    port = free_port()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "plateau_tracker",
            "dashboard",
            "--home",
            str(tmp_path),
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        check=False,
    )
    assert out.returncode == 2
    assert "refusing to listen on 0.0.0.0 without a sign-in token" in out.stderr
    assert "PLATEAU_DASHBOARD_TOKEN" in out.stderr
    assert not (tmp_path / "plateau.db").exists()  # nothing started: no tracker, no store


def test_with_a_sign_in_token_a_viewer_sees_nothing_until_giving_it(
    tracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLATEAU_URL", tracker.url)
    monkeypatch.setenv("PLATEAU_DASHBOARD_TOKEN", "team-secret-123")
    _api.st.cache_data.clear()
    app = AppTest.from_file(str(APP), default_timeout=60)
    app.run()
    assert not app.exception
    [field] = app.text_input
    assert field.label == "Dashboard token"
    assert not app.sidebar.caption  # no tracker address, no page, no run shown
    field.input("wrong").run()
    assert [e.value for e in app.error] == ["That is not this dashboard's token."]
    assert not app.sidebar.caption
    app.text_input[0].input("team-secret-123").run()
    assert not app.exception
    assert not app.error
    assert any(tracker.url in caption.value for caption in app.sidebar.caption)


def test_without_a_sign_in_token_loopback_viewers_go_straight_in(
    tracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLATEAU_URL", tracker.url)
    monkeypatch.delenv("PLATEAU_DASHBOARD_TOKEN", raising=False)
    app = AppTest.from_file(str(APP), default_timeout=60)
    app.run()
    assert not app.exception
    assert not app.text_input or app.text_input[0].label != "Dashboard token"
    assert any(tracker.url in caption.value for caption in app.sidebar.caption)
