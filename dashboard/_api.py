"""The dashboard's only way to the data: the tracker's HTTP API (URL and token from the environment)."""

from __future__ import annotations

import math
import os
from typing import Any

import httpx
import streamlit as st

DEFAULT_URL = "http://127.0.0.1:8765"


def tracker_url() -> str:
    return os.environ.get("PLATEAU_URL", DEFAULT_URL).rstrip("/")


@st.cache_data(ttl=2, show_spinner=False)
def _cached_get(url: str, token: str | None, path: str, params: tuple[tuple[str, Any], ...]) -> Any:
    # The URL and token are part of the cache key: another tracker must never be answered from this cache.
    headers = {"authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(f"{url}/api/v1{path}", params=dict(params), headers=headers, timeout=30)
    response.raise_for_status()
    return response.json()


def _get(path: str, **params: Any) -> Any:
    return _cached_get(tracker_url(), os.environ.get("PLATEAU_TOKEN"), path, tuple(sorted(params.items())))


def number(value: Any) -> float | None:
    """API floats: numbers, or the strings NaN/Infinity/-Infinity."""
    if value is None:
        return None
    if isinstance(value, str):
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(value, math.nan)
    return float(value)


def runs(project: str | None = None, experiment: str | None = None) -> list[dict[str, Any]]:
    params = {k: v for k, v in {"project": project, "experiment": experiment, "limit": 1000}.items() if v}
    data: list[dict[str, Any]] = _get("/runs", **params)["data"]
    return data


def run(run_id: int) -> dict[str, Any]:
    result: dict[str, Any] = _get(f"/runs/{run_id}")
    return result


def decisions(run_id: int) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = _get(f"/runs/{run_id}/decisions")["data"]
    return data


def keys(run_id: int) -> list[str]:
    data: list[str] = _get(f"/runs/{run_id}/keys")["keys"]
    return data


def series(run_id: int, key: str, points: int = 2000, rank: int = 0) -> list[dict[str, Any]]:
    """The key's curve, downsampled by the tracker (min/max buckets) to at most ``points``."""
    data: list[dict[str, Any]] = _get(f"/runs/{run_id}/series", key=key, points=points, rank=rank)["points"]
    return data


def summary(run_id: int) -> dict[str, Any]:
    """The run's reported figures (``summary``) and derived convergence times (``convergence``)."""
    result: dict[str, Any] = _get(f"/runs/{run_id}/summary")
    return result


def health(run_id: int) -> dict[str, Any]:
    result: dict[str, Any] = _get(f"/runs/{run_id}/health")
    return result


def guarded(load: Any, *args: Any, **kwargs: Any) -> Any:
    """Call a loader; show a clear error (never a traceback) and stop the page when the tracker fails."""
    try:
        return load(*args, **kwargs)
    except httpx.HTTPStatusError as exc:
        detail = exc.response.text[:300]
        st.error(f"The tracker at {tracker_url()} answered {exc.response.status_code}: {detail}")
    except httpx.HTTPError as exc:
        st.error(
            f"Cannot reach the tracker at {tracker_url()} ({type(exc).__name__}). Is `plateau serve` running?"
        )
    st.stop()
