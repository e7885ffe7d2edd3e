"""The batches of a process's runs carried together to the tracker (``plateau_tracker._carrier``), against
the shared tracker: batches that meet go in one request, and each gets its own answer or error."""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

import plateau_tracker as plateau
from plateau_tracker._transport import RejectedError, RetryableError, Transport
from tests._server import TrackerProcess, free_port

runs_sent: list[list[int]] = []  # the runs of each request lines_sent counted, in order

_POLICY = {"monitor": "loss", "mode": "min", "rules": [{"rule": "patience", "patience": 2}]}


@pytest.fixture
def lines_sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many lines each request of many runs' batches carried, in order."""
    sent: list[int] = []
    original = Transport.send_lines

    def counting(self: Transport, lines: bytes) -> list[Any]:
        sent.append(lines.count(b"\n"))
        runs_sent.append(sorted(json.loads(line)["run_id"] for line in lines.splitlines()))
        return original(self, lines)

    monkeypatch.setattr(Transport, "send_lines", counting)
    return sent


def _meeting(transport: Transport, calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` in threads that all queue their batch while another request holds the way, then let
    them go: what each returned or raised."""
    carrier = transport.carrier()
    outcomes: list[Any] = [None] * len(calls)

    def call(index: int) -> None:
        try:
            outcomes[index] = calls[index]()
        except Exception as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=call, args=(index,)) for index in range(len(calls))]
    lanes = list(carrier._lanes.values())
    for lane in lanes:  # each lane's turn taken, as by a request in flight
        lane.turn.acquire()
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while sum(len(lane.waiting) for lane in lanes) < len(calls):
        assert time.monotonic() < deadline, "the batches never queued"
        time.sleep(0.01)
    for lane in lanes:
        lane.turn.release()
    for thread in threads:
        thread.join(30)
    return outcomes


def _series(key: str, steps: list[int], values: list[float]) -> list[dict[str, Any]]:
    return [{"key": key, "rank": 0, "steps": steps, "values": values, "wall_times": None}]


def test_batches_that_meet_share_one_request_and_each_gets_its_own_answer(
    tracker: TrackerProcess, lines_sent: list[int]
) -> None:
    transport = Transport(tracker.url)
    try:
        runs = [transport.create_run({"project": "carrier", "policy": _POLICY})["id"] for _ in range(3)]
        calls: list[Callable[[], Any]] = [
            lambda: transport.send_series(runs[0], "a", _series("loss", [0, 1, 2, 3], [1.0, 2.0, 3.0, 4.0])),
            lambda: transport.send_series(runs[1], "b", _series("loss", [0, 1], [1.0, 0.5])),
            lambda: transport.send_series(runs[2], "c", _series("loss", [-5], [1.0])),  # refused: its own 422
            lambda: transport.send_series(2**31 - 3, "d", _series("loss", [0], [1.0])),  # no such run
        ]
        stopped, improving, refused, missing = _meeting(transport, calls)
    finally:
        transport.close()
    assert lines_sent == [4]
    assert stopped.decision.action == "stop"
    assert stopped.judged_step == 3
    assert (improving.decision.action, improving.judged_step) == ("continue", 1)
    assert isinstance(refused, RejectedError)
    assert refused.status == 422
    assert ["body", "series", 0, "steps", 0] in [error["loc"] for error in refused.detail]
    assert refused.url == tracker.url
    assert isinstance(missing, RejectedError)
    assert missing.status == 404
    with httpx.Client(base_url=tracker.url) as http:
        stored = http.get(f"/api/v1/runs/{runs[1]}/history", params={"key": "loss"}).json()["points"]
        assert [(p["step"], p["value"]) for p in stored] == [(0, 1.0), (1, 0.5)]
        assert http.get(f"/api/v1/runs/{runs[2]}/keys").json()["keys"] == []


def test_a_batch_alone_goes_on_its_runs_own_route(tracker: TrackerProcess, lines_sent: list[int]) -> None:
    with Transport(tracker.url) as transport:
        run = transport.create_run({"project": "carrier", "policy": _POLICY})["id"]
        for step in range(3):
            answer = transport.send_series(run, f"b{step}", _series("loss", [step], [1.0 / (step + 1)]))
            assert answer.judged_step == step
    assert lines_sent == []


def test_a_request_that_fails_fails_each_batch_it_held_with_an_error_of_its_own(
    lines_sent: list[int],
) -> None:
    with Transport(f"http://127.0.0.1:{free_port()}", timeout=2.0) as transport:  # nothing listens
        calls: list[Callable[[], Any]] = [
            (lambda run=run: transport.send_series(run, "x", _series("loss", [0], [1.0])))
            for run in (1, 2, 3)
        ]
        outcomes = _meeting(transport, calls)
    assert lines_sent == [3]
    assert all(isinstance(outcome, RetryableError) for outcome in outcomes), outcomes
    assert len({id(outcome) for outcome in outcomes}) == 3


def test_runs_of_one_process_log_through_the_carrier_and_lose_nothing(tracker: TrackerProcess) -> None:
    """Thirty SDK runs in threads of one process: every point stored, each run's stop its own."""
    project = f"carrier-{uuid.uuid4().hex[:6]}"
    stops: dict[int, int | None] = {}

    def train(index: int) -> None:
        run = plateau.init(
            project=project, url=tracker.url, monitor="loss", mode="min", rules=_POLICY["rules"]
        )
        turn = 5 + index % 7  # the loss rises after this step: patience 2 stops two steps later
        for step in range(40):
            run.log({"train/loss": math.exp(-step), "lr": 0.1})
            run.log({"loss": abs(step - turn) + 1.0}, step=step)
            if run.should_stop():
                break
        run.finish()
        stops[turn] = run.latest.step if run.latest.stop else None

    threads = [threading.Thread(target=train, args=(index,)) for index in range(30)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert stops == {turn: turn + 2 for turn in range(5, 12)}
    with httpx.Client(base_url=tracker.url) as http:
        runs = http.get("/api/v1/runs", params={"project": project, "limit": 100}).json()["data"]
        assert len(runs) == 30
        for run in runs:
            stored = http.get(f"/api/v1/runs/{run['id']}/history", params={"key": "loss"}).json()["points"]
            assert [p["step"] for p in stored] == list(range(run["stop_step"] + 1))


def test_batches_a_loop_waits_on_go_in_requests_of_their_own(
    tracker: TrackerProcess, lines_sent: list[int]
) -> None:
    runs_sent.clear()
    with Transport(tracker.url) as transport:
        runs = [transport.create_run({"project": "carrier", "policy": _POLICY})["id"] for _ in range(4)]
        calls: list[Callable[[], Any]] = [
            (
                lambda run=run, urgent=index % 2 == 1: transport.send_series(
                    run, "u", _series("loss" if urgent else "train/loss", [0], [1.0]), urgent=urgent
                )
            )
            for index, run in enumerate(runs)
        ]
        outcomes = _meeting(transport, calls)
    assert all(outcome.judged_step in (0, None) for outcome in outcomes), outcomes
    assert sorted(runs_sent) == [[runs[0], runs[2]], [runs[1], runs[3]]]
