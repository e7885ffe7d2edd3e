"""The few tracker API calls TensorBoard export and import need, over one keep-alive HTTP client."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import httpx

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def number(value: Any) -> float:
    """An API float: a JSON number, or one of the strings NaN/Infinity/-Infinity."""
    return _NON_FINITE[value] if isinstance(value, str) else float(value)


class TrackerApi:
    def __init__(self, url: str, token: str | None = None, timeout: float = 120.0) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._client = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def __enter__(self) -> TrackerApi:
        return self

    def __exit__(self, *_: object) -> None:
        self._client.close()

    def _get(self, path: str, **params: Any) -> Any:
        response = self._client.get(f"/api/v1{path}", params=params)
        response.raise_for_status()
        return response.json()

    def _send(self, method: str, path: str, body: dict[str, Any]) -> Any:
        # Python's json writes NaN/Infinity literals, which the tracker reads back faithfully.
        response = self._client.request(
            method, f"/api/v1{path}", content=json.dumps(body), headers={"content-type": "application/json"}
        )
        response.raise_for_status()
        return response.json()

    def run(self, run_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self._get(f"/runs/{run_id}")
        return result

    def runs(self, *, experiment: str, project: str | None) -> list[dict[str, Any]]:
        """Every run of ``experiment``, oldest first."""
        found: list[dict[str, Any]] = []
        while True:
            params: dict[str, Any] = {"experiment": experiment, "limit": 1000, "offset": len(found)}
            if project:
                params["project"] = project
            page = self._get("/runs", **params)
            found += page["data"]
            if not page["data"] or len(found) >= page["count"]:
                return sorted(found, key=lambda run: run["id"])

    def key_ranks(self, run_id: int) -> dict[str, list[int]]:
        ranks: dict[str, list[int]] = self._get(f"/runs/{run_id}/keys")["ranks"]
        return ranks

    def history(self, run_id: int, key: str, rank: int) -> Iterator[tuple[int, float, float]]:
        """``(step, value, wall_time)`` of every point of ``key`` on ``rank``, in step order."""
        start: int | None = 0
        while start is not None:
            page = self._get(f"/runs/{run_id}/history", key=key, rank=rank, start_step=start, limit=100_000)
            for point in page["points"]:
                yield point["step"], number(point["value"]), point["wall_time"]
            start = page["next_step"]

    def decisions(self, run_id: int) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = self._get(f"/runs/{run_id}/decisions")["data"]
        return data

    def summary(self, run_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self._get(f"/runs/{run_id}/summary")
        return result

    def create_run(self, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._send("POST", "/runs", body)
        return result

    def ingest(self, run_id: int, batch_id: str, points: list[dict[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = self._send(
            "POST", f"/runs/{run_id}/metrics", {"batch_id": batch_id, "points": points}
        )
        return result

    def update_summary(self, run_id: int, summary: dict[str, Any]) -> None:
        self._send("PATCH", f"/runs/{run_id}/summary", {"summary": summary})

    def finish(self, run_id: int, status: str) -> None:
        self._send("POST", f"/runs/{run_id}/finish", {"status": status})
