"""The one client of the tracker's HTTP API: the SDK's calls and everything else that reads the tracker
(the CLI's remote commands, TensorBoard export and import, replay, the dashboard, the demo). Standard
library only, over kept-alive connections; errors sorted into "retry" and "give up"; the API's NaN and
Infinity decoded in one place (``plateau_tracker._numbers``). Public as :mod:`plateau_tracker.client`."""

from __future__ import annotations

import atexit
import json
import math
import os
import sys
from array import array
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, TypeVar
from urllib.parse import quote

from plateau_tracker._carrier import Carrier, Together, UnsupportedError, carrier_for
from plateau_tracker._decision import Answer, Decision
from plateau_tracker._http import HttpClient, Reply, TransportErrors
from plateau_tracker._numbers import number
from plateau_tracker._retry import RETRYABLE_STATUSES, parse_retry_after

DEFAULT_URL = "http://127.0.0.1:8765"

# Every request with a body sends JSON (the series batches included).
_JSON = {"content-type": "application/json"}
# Many runs' batches, a line each (POST /api/v1/batches).
_NDJSON = {"content-type": "application/x-ndjson"}
_T = TypeVar("_T")


class TrackerError(Exception):
    """A call to the tracker failed; ``status`` is the HTTP status (None when no answer came), ``url`` the
    tracker's."""

    url: str | None = None

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RetryableError(TrackerError):
    """The tracker could not be reached or asked us to come back (``retry_after`` seconds, if it said)."""

    def __init__(self, message: str, retry_after: float | None = None, status: int | None = None) -> None:
        super().__init__(message, status)
        self.retry_after = retry_after


class OfflineByChoiceError(RetryableError):
    """No exchange was tried: the run was told to stay offline (``PLATEAU_OFFLINE``, ``PLATEAU_DISABLED``).
    Unlike a failure it says nothing of the tracker, whom other runs of the process still reach."""


class RejectedError(TrackerError):
    """The tracker refused the request as it is; sending it again will not help. ``detail``: the
    answer's ``detail`` as the tracker wrote it (a 422 lists each error with its location), or None."""

    def __init__(self, message: str, status: int | None = None, detail: Any = None) -> None:
        super().__init__(message, status)
        self.detail = detail


class NotFoundError(RejectedError):
    """404: no such run (or key, or route: the URL may not lead to a tracker)."""


def _parsed_detail(reply: Reply) -> Any:
    """The ``detail`` of an error answer, None when it has none."""
    try:
        return json.loads(reply.body).get("detail")
    except (ValueError, AttributeError):
        return None


def _encoded(body: dict[str, Any]) -> bytes:
    # Python's json writes NaN and Infinity literals, which the tracker reads back faithfully; anything else
    # not JSON-able is sent as its str().
    return json.dumps(body, separators=(",", ":"), default=str).encode()


def _refusal(
    request: str, status: int, detail: Any, retry_after: str | None, body: bytes = b""
) -> RetryableError | RejectedError:
    """The error an answer of ``status`` to ``request`` (``POST /api/v1/...``) is: "come back later" (with
    the ``Retry-After`` it gave), or a refusal with its ``detail`` (the answer's ``body`` shown instead
    when it has none)."""
    if status in RETRYABLE_STATUSES:
        return RetryableError(
            f"HTTP {status} from {request}", retry_after=parse_retry_after(retry_after), status=status
        )
    text = body[:500].decode("utf-8", "replace") if detail is None else json.dumps(detail)[:500]
    refused = NotFoundError if status == 404 else RejectedError
    return refused(f"HTTP {status} from {request}: {text}", status, detail=detail)


class Transport:
    """The tracker's API v1 as the SDK uses it. Thread-safe. The batches of the runs of one process bound
    for one tracker share requests when they meet (:mod:`plateau_tracker._carrier`)."""

    carries = True
    """Whether metric batches go through the process's carrier (False: each on its run's route)."""

    def __init__(self, url: str, *, timeout: float = 10.0, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self._timeout, self._token = timeout, token
        headers = {"user-agent": "plateau-sdk", "accept": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self._client = HttpClient(
            self.url, timeout=timeout, connect_timeout=min(timeout, 2.0), headers=headers
        )

    def reset_after_fork(self) -> None:
        """In a forked child: the inherited keep-alive connections are the parent's. They are dropped,
        never used or shut down, so the parent's connections stay intact."""
        self._client.forget()

    def _request(self, method: str, path: str, **options: Any) -> Any:
        return self._naming_url(self._exchange, method, path, **options)

    def _naming_url(self, call: Callable[..., _T], *args: Any, **options: Any) -> _T:
        """``call``'s result; an error it raises names this tracker's URL."""
        try:
            return call(*args, **options)
        except TrackerError as exc:
            exc.url = self.url
            raise

    def _exchange(self, method: str, path: str, **options: Any) -> Any:
        reply = self._reply(method, path, **options)
        if reply.status == 204:
            return None
        try:
            return json.loads(reply.body)
        except ValueError as exc:
            raise RetryableError(f"unreadable answer from {method} {path}") from exc

    def _reply(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
        media: dict[str, str] = _JSON,
    ) -> Reply:
        """The tracker's successful reply, or the error that says why there is none."""
        try:
            reply = self._client.request(
                method,
                path,
                body=body,
                headers=media if body is not None else None,
                params=params,
                timeout=timeout,
            )
        except TransportErrors as exc:  # connection refused, reset, timeouts, TLS, broken HTTP
            raise RetryableError(f"{type(exc).__name__}: {exc}") from exc
        if reply.status >= 400:
            detail = _parsed_detail(reply)
            raise _refusal(
                f"{method} {path}", reply.status, detail, reply.headers.get("retry-after"), reply.body
            )
        return reply

    def create_run(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            result: dict[str, Any] = self._send_json("POST", "/api/v1/runs", body)
        except RejectedError as exc:
            if not str(exc).startswith("HTTP 404 "):
                raise
            # A tracker answers this route whatever the run: a 404 says the URL does not lead to one.
            suffix = " without /api/v1" if self.url.endswith("/api/v1") else ""
            raise NotFoundError(
                f"HTTP 404 from {self.url}/api/v1/runs: no Plateau tracker there; give the tracker's base "
                f"URL{suffix}, like http://127.0.0.1:8765",
                404,
            ) from None
        return result

    def send_points(self, run_id: int, batch_id: str, points: list[dict[str, Any]]) -> Answer:
        """Post a batch of points, one object per point."""
        return self._send_batch(run_id, {"batch_id": batch_id, "points": points})

    def send_series(
        self, run_id: int, batch_id: str, series: list[dict[str, Any]], *, urgent: bool = False
    ) -> Answer:
        """Post a batch as series: per key and rank, ``steps``, ``values`` and ``wall_times`` columns (the
        compact form: about half the bytes, and far less work for both ends). ``urgent``: a loop waits
        for its verdict; it goes before other runs' batches that wait with it."""
        return self._send_batch(run_id, {"batch_id": batch_id, "series": series}, urgent)

    def _send_batch(self, run_id: int, body: dict[str, Any], urgent: bool = False) -> Answer:
        path, content = f"/api/v1/runs/{run_id}/metrics", _encoded(body)

        def alone() -> Any:
            return self._request("POST", path, body=content)

        if not self.carries:
            return Answer.from_json(alone())
        return Answer.from_json(self.carrier().carry(run_id, content, alone, urgent=urgent))

    def carrier(self) -> Carrier:
        """The process's carrier of batches to this tracker with this token."""
        return carrier_for((type(self), self.url, self._token, self._timeout), self._carrying)

    def _carrying(self) -> Together:
        """What a carrier of this tracker's batches posts with: a client of its own, which outlives the
        runs (each closes its transport when it ends)."""
        carrying = type(self)(self.url, timeout=self._timeout, token=self._token)
        atexit.register(carrying.close)
        return lambda lines: carrying.send_lines(lines)

    def send_lines(self, lines: bytes) -> list[Any]:
        """Post many runs' batches together (``POST /api/v1/batches``): lines of JSON, each a run's batch
        with its ``run_id``. Per line, in order: the run's answer, or the error its own route would have
        raised. :class:`~plateau_tracker._carrier.UnsupportedError`: the tracker cannot take the request."""
        path = "/api/v1/batches"
        try:
            reply = self._naming_url(self._reply, "POST", path, body=lines, media=_NDJSON)
        except RejectedError as exc:  # a tracker without the route (404, 405), or the request refused whole
            raise UnsupportedError(str(exc), lasting=exc.status in (404, 405)) from exc
        try:
            results = json.loads(reply.body)["results"]
            if not isinstance(results, list) or len(results) != lines.count(b"\n"):
                raise ValueError(f"{len(results)} answers")
            outcomes: list[Any] = []
            for item in results:
                status = int(item["status"])
                if status == 200:
                    outcomes.append(item["answer"])
                    continue
                where = f"POST /api/v1/runs/{item.get('run_id')}/metrics"
                refusal = _refusal(where, status, item.get("detail"), item.get("retry_after"))
                refusal.url = self.url
                outcomes.append(refusal)
        except (ValueError, KeyError, TypeError) as exc:
            raise RetryableError(f"unreadable answer from POST {path}: {exc}") from exc
        return outcomes

    def _send_json(self, method: str, path: str, body: dict[str, Any], timeout: float | None = None) -> Any:
        return self._request(method, path, body=_encoded(body), timeout=timeout)

    def get_decision(self, run_id: int, *, step: int | None = None, wait: float = 0.0) -> Decision:
        params: dict[str, Any] = {"wait": round(max(0.0, wait), 3)}
        if step is not None:
            params["step"] = step
        result = self._request("GET", f"/api/v1/runs/{run_id}/decision", params=params, timeout=wait + 5.0)
        return Decision.from_json(result)

    def decisions_at(self, run_id: int, step: int) -> list[Decision]:
        """The run's decisions about exactly ``step``, oldest first."""
        result = self._request("GET", f"/api/v1/runs/{run_id}/decisions", params={"step": step})
        return [Decision.from_json(item) for item in result["data"]]

    def compare_away_verdicts(self, run_id: int, verdicts: list[dict[str, Any]]) -> dict[str, Any]:
        """Tell the tracker what the SDK answered alone at steps it has judged since: ``{step, checkpoint,
        stop}`` each. The answer: ``{compared, disagreed, not_judged}`` (steps)."""
        result: dict[str, Any] = self._send_json(
            "POST", f"/api/v1/runs/{run_id}/away-verdicts", {"verdicts": verdicts}
        )
        return result

    def update_summary(self, run_id: int, summary: dict[str, Any]) -> None:
        self._send_json("PATCH", f"/api/v1/runs/{run_id}/summary", {"summary": summary})

    def heartbeat(self, run_id: int) -> None:
        """The trainer is alive though it logs nothing now: the tracker does not mark the run crashed."""
        # A JSON body, empty: the tracker refuses a POST a browser could forge (any other content type).
        self._send_json("POST", f"/api/v1/runs/{run_id}/heartbeat", {}, timeout=10.0)

    def finish_run(
        self, run_id: int, status: str, timeout: float | None = None, ended_at: float | None = None
    ) -> None:
        """Mark the run ended; ``ended_at`` (unix seconds) when it ended earlier than now (a replay)."""
        body: dict[str, Any] = {"status": status}
        if ended_at is not None:
            body["ended_at"] = datetime.fromtimestamp(ended_at, timezone.utc).isoformat()
        self._send_json("POST", f"/api/v1/runs/{run_id}/finish", body, timeout=timeout)

    # --- reading the tracker (the CLI, TensorBoard export, replay, the dashboard) ------------------------

    def health(self) -> dict[str, Any]:
        """``{status, version, database, store, wakeups, storage}`` of the tracker (status ``ok``, or
        ``degraded`` after a recent storage failure; a tracker that cannot reach its database answers 503)."""
        result: dict[str, Any] = self._request("GET", "/api/v1/health")
        return result

    def run(self, run_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", f"/api/v1/runs/{run_id}")
        return result

    def runs(self, *, project: str | None = None, experiment: str | None = None) -> list[dict[str, Any]]:
        """Every run (of ``project``/``experiment`` when given), oldest first, read page by page."""
        found: list[dict[str, Any]] = []
        params: dict[str, Any] = {"project": project, "experiment": experiment, "limit": 1000}
        params = {k: v for k, v in params.items() if v is not None}
        while True:
            page = self._request("GET", "/api/v1/runs", params=params)
            found += page["data"]
            if not page["data"] or len(found) >= page["count"]:
                return sorted(found, key=lambda run: int(run["id"]))
            if "next" in page:  # by key: each page costs the same
                params["before"] = page["next"]
            else:  # a tracker before the keyset cursor
                params["offset"] = len(found)

    def runs_page(
        self,
        *,
        project: str | None = None,
        experiment: str | None = None,
        statuses: Sequence[str] = (),
        name: str | None = None,
        tags: Sequence[str] = (),
        limit: int = 100,
        before: int | None = None,
    ) -> dict[str, Any]:
        """One page of runs, newest first: ``{data, count, next}``. Pass ``next`` back as ``before`` for
        the following page; ``count`` is how many runs the filters match in all (``tags``: runs holding
        every one)."""
        params: dict[str, Any] = {"project": project, "experiment": experiment, "name": name, "limit": limit}
        params = {k: v for k, v in params.items() if v is not None}
        if statuses:
            params["status"] = list(statuses)
        if tags:
            params["tag"] = list(tags)
        if before is not None:
            params["before"] = before
        page: dict[str, Any] = self._request("GET", "/api/v1/runs", params=params)
        return page

    def projects(self) -> list[dict[str, Any]]:
        """Every project the token may read, by name: ``{name, runs, experiments: [{name, runs}]}``."""
        data: list[dict[str, Any]] = self._request("GET", "/api/v1/projects")["data"]
        return data

    def keys(self, run_id: int) -> dict[str, Any]:
        """``{keys, ranks}``: the run's metric keys, and the ranks that logged each."""
        result: dict[str, Any] = self._request("GET", f"/api/v1/runs/{run_id}/keys")
        return result

    def history(self, run_id: int, key: str, rank: int = 0) -> Iterator[tuple[int, float, float]]:
        """``(step, value, wall_time)`` of every point of ``key`` on ``rank``, in step order (pages of
        100,000 points). ``NotFoundError`` when the run has no such key."""
        start: int | None = 0
        while start is not None:
            params = {"key": key, "rank": rank, "start_step": start, "limit": 100_000}
            page = self._request("GET", f"/api/v1/runs/{run_id}/history", params=params)
            for point in page["points"]:
                yield point["step"], _float(point["value"]), point["wall_time"]
            start = page["next_step"]

    def history_columns(
        self, run_id: int, key: str, rank: int = 0, *, page: int = 1_000_000
    ) -> tuple[array[int], array[float], array[float]]:
        """Every point of ``key`` on ``rank`` as three columns in step order: steps, values and wall times
        (NaN and infinities as they were logged). Read in packed pages of up to ``page`` points
        (``form=binary``): nothing is parsed, so 10,000,000 points take seconds, not a JSON parse each.
        ``NotFoundError`` when the run has no such key."""
        steps, values, wall_times = array("q"), array("d"), array("d")
        start: int | None = 0
        path = f"/api/v1/runs/{run_id}/history"
        while start is not None:
            params = {"key": key, "rank": rank, "start_step": start, "limit": page, "form": "binary"}
            reply = self._naming_url(self._reply, "GET", path, params=params)
            count = int(reply.headers.get("x-plateau-points", "-1"))
            if count < 0 or len(reply.body) != 24 * count:
                raise RetryableError(f"unreadable answer from GET {path}: {len(reply.body)} bytes")
            for column, offset in ((steps, 0), (values, 8), (wall_times, 16)):
                column.frombytes(reply.body[offset * count : (offset + 8) * count])
            following = reply.headers.get("x-plateau-next-step")
            start = int(following) if following is not None else None
        if sys.byteorder != "little":  # the wire is little-endian
            for column in (steps, values, wall_times):
                column.byteswap()
        return steps, values, wall_times

    def series(self, run_id: int, key: str, points: int = 2000, rank: int = 0) -> list[dict[str, Any]]:
        """The key's curve downsampled by the tracker to at most ``points``; values decoded."""
        params = {"key": key, "points": points, "rank": rank}
        data: list[dict[str, Any]] = self._request("GET", f"/api/v1/runs/{run_id}/series", params=params)[
            "points"
        ]
        return [{**point, "value": number(point["value"])} for point in data]

    def decision_list(self, run_id: int) -> list[dict[str, Any]]:
        """Every decision of the run, oldest first, as the API gives them (with their evidence)."""
        data: list[dict[str, Any]] = self._request("GET", f"/api/v1/runs/{run_id}/decisions")["data"]
        return data

    def summary(self, run_id: int) -> dict[str, Any]:
        """``{summary, convergence}``: the figures the trainer reported, and those the tracker derives."""
        result: dict[str, Any] = self._request("GET", f"/api/v1/runs/{run_id}/summary")
        return result

    def run_health(self, run_id: int) -> dict[str, Any]:
        """The run's distributed health: per-rank figures, straggler, staleness."""
        result: dict[str, Any] = self._request("GET", f"/api/v1/runs/{run_id}/health")
        return result

    # --- deleting (the CLI's ``plateau delete``) -----------------------------------------------------------

    def delete_run(self, run_id: int) -> dict[str, Any]:
        """Delete the run with everything it holds; what was removed (runs, points, deliveries)."""
        result: dict[str, Any] = self._request("DELETE", f"/api/v1/runs/{run_id}")
        return result

    def delete_experiment(self, project: str, experiment: str) -> dict[str, Any]:
        """Delete the experiment and every run in it; what was removed."""
        path = f"/api/v1/projects/{quote(project, safe='')}/experiments/{quote(experiment, safe='')}"
        result: dict[str, Any] = self._request("DELETE", path)
        return result

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _float(value: Any) -> float:
    decoded = number(value)
    return math.nan if decoded is None else decoded


def connect(url: str | None = None, *, token: str | None = None, timeout: float = 120.0) -> Transport:
    """A client of the tracker at ``url``, else ``$PLATEAU_URL``, else http://127.0.0.1:8765, with
    ``token``, else ``$PLATEAU_TOKEN``: how every command finds its tracker."""
    resolved = url or os.environ.get("PLATEAU_URL") or DEFAULT_URL
    return Transport(resolved, timeout=timeout, token=token or os.environ.get("PLATEAU_TOKEN"))
