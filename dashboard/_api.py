"""The dashboard's only way to the data: the tracker's HTTP API through the one client
(``plateau_tracker.client``), with the URL and token from the environment, and a 2-second cache."""

from __future__ import annotations

import os
from typing import Any

import streamlit as st

from plateau_tracker.client import DEFAULT_URL, TrackerClient, TrackerError, number

__all__ = ["DEFAULT_URL", "number"]


def tracker_url() -> str:
    return os.environ.get("PLATEAU_URL", DEFAULT_URL).rstrip("/")


@st.cache_resource(show_spinner=False)
def _client(url: str, token: str | None) -> TrackerClient:
    # One kept-alive client per tracker and token: another tracker is never answered from this one.
    return TrackerClient(url, timeout=30.0, token=token)


@st.cache_data(ttl=2, show_spinner=False)
def _cached(
    url: str, token: str | None, call: str, args: tuple[Any, ...], options: tuple[tuple[str, Any], ...]
) -> Any:
    # The URL and token are part of the cache key: another tracker must never be answered from this cache.
    return getattr(_client(url, token), call)(*args, **dict(options))


def _get(call: str, *args: Any, **options: Any) -> Any:
    return _cached(tracker_url(), os.environ.get("PLATEAU_TOKEN"), call, args, tuple(sorted(options.items())))


def runs_page(
    *,
    project: str | None = None,
    experiment: str | None = None,
    statuses: tuple[str, ...] = (),
    name: str | None = None,
    limit: int = 100,
    before: int | None = None,
) -> dict[str, Any]:
    """One page of runs, newest first, filtered by the tracker: ``{data, count, next}``."""
    page: dict[str, Any] = _get(
        "runs_page",
        project=project,
        experiment=experiment,
        statuses=statuses,
        name=name,
        limit=limit,
        before=before,
    )
    return page


def projects() -> list[dict[str, Any]]:
    """Every project with its experiments and their run counts (no run is read)."""
    data: list[dict[str, Any]] = _get("projects")
    return data


def experiments() -> list[tuple[str, str]]:
    """``(project, experiment)`` of every experiment, by name, from the projects list (no run is read)."""
    return [(p["name"], e["name"]) for p in projects() for e in p["experiments"]]


def newest_runs(
    project: str | None = None, experiment: str | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    """The newest ``limit`` runs (at most 1,000), of ``project``/``experiment`` when given, newest first:
    pages choose among these, never among every run (10,000 runs took seconds to read)."""
    data: list[dict[str, Any]] = runs_page(project=project, experiment=experiment, limit=limit)["data"]
    return data


def run(run_id: int) -> dict[str, Any]:
    result: dict[str, Any] = _get("run", run_id)
    return result


def run_if_any(run_id: int) -> dict[str, Any] | None:
    """The run, or None when the tracker has no such run (any other failure raises)."""
    try:
        return run(run_id)
    except TrackerError as exc:
        if exc.status == 404:
            return None
        raise


def decisions(run_id: int) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = _get("decision_list", run_id)
    return data


def keys(run_id: int) -> list[str]:
    data: list[str] = _get("keys", run_id)["keys"]
    return data


def series(run_id: int, key: str, points: int = 2000, rank: int = 0) -> list[dict[str, Any]]:
    """The key's curve, downsampled by the tracker (min/max buckets) to at most ``points``; values are
    floats (NaN and infinities included)."""
    data: list[dict[str, Any]] = _get("series", run_id, key, points, rank)
    return data


def summary(run_id: int) -> dict[str, Any]:
    """The run's reported figures (``summary``) and derived convergence times (``convergence``)."""
    result: dict[str, Any] = _get("summary", run_id)
    return result


def health(run_id: int) -> dict[str, Any]:
    result: dict[str, Any] = _get("run_health", run_id)
    return result


def guarded(load: Any, *args: Any, **kwargs: Any) -> Any:
    """Call a loader; show a clear error (never a traceback) and stop the page when the tracker fails."""
    try:
        return load(*args, **kwargs)
    except TrackerError as exc:
        if exc.status is None:
            st.error(f"Cannot reach the tracker at {tracker_url()} ({exc}). Is `plateau serve` running?")
        else:
            st.error(f"The tracker at {tracker_url()} answered {exc}")
    st.stop()
