"""The SDK against a real tracker, and against no tracker, a hung one, and one that comes back late."""

from __future__ import annotations

import logging
import math
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

import httpx
import pytest

import plateau_tracker as plateau
from tests._server import TrackerProcess, free_port

PATIENCE_2 = [{"rule": "patience", "patience": 2}, {"rule": "checkpoint"}]


def wait_for(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return condition()


def test_decisions_reach_the_training_loop(tracker: TrackerProcess) -> None:
    run = plateau.init(project="sdk", monitor="val/acc", mode="max", rules=PATIENCE_2, url=tracker.url)
    assert run.id is not None
    run.log({"val/acc": 0.5, "train/loss": 1.0}, step=0)
    assert wait_for(run.should_checkpoint)
    assert not run.should_checkpoint()  # once per new best
    for step, value in [(1, 0.7), (2, 0.6), (3, 0.65)]:
        run.log({"val/acc": value, "train/loss": 1.0 / (step + 1)}, step=step)
    assert wait_for(run.should_stop)
    assert run.latest.action == "stop"
    assert run.latest.best_step == 1
    assert run.latest.step == 3
    assert "has not improved on 0.7 (step 1)" in run.latest.reason
    assert run.finish() == 0
    stored = httpx.get(f"{tracker.url}/api/v1/runs/{run.id}").json()
    assert stored["status"] == "stopped"
    history = httpx.get(f"{tracker.url}/api/v1/runs/{run.id}/history", params={"key": "train/loss"}).json()
    assert [p["step"] for p in history["points"]] == [0, 1, 2, 3]


def test_decision_for_an_exact_step(tracker: TrackerProcess) -> None:
    with plateau.init(project="sdk", monitor="loss", mode="min", rules=PATIENCE_2, url=tracker.url) as run:
        actions = []
        for step, value in enumerate([1.0, 0.5, 0.75, 0.75, 0.1]):
            run.log({"loss": value}, step=step)
            decision = run.decision(step=step, timeout=10)
            assert decision.judged
            assert decision.step == step
            actions.append(decision.action)
            if decision.stop:
                break
        assert actions == ["checkpoint", "checkpoint", "continue", "stop"]


def test_non_numeric_values_are_dropped_without_raising(tracker: TrackerProcess, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="plateau")
    with plateau.init(project="sdk", url=tracker.url) as run:
        run.log({"good": 1.0, "bad": "abc", "obj": object()}, step=0)
        run.log({"good": 2.0}, step=-3)
        run.log({"good": 3.0}, step=1)
        assert run.flush(10)
        keys = httpx.get(f"{tracker.url}/api/v1/runs/{run.id}/keys").json()["keys"]
        history = httpx.get(f"{tracker.url}/api/v1/runs/{run.id}/history", params={"key": "good"}).json()
    assert keys == ["good"]
    assert [p["value"] for p in history["points"]] == [1.0, 3.0]
    assert "'bad' = 'abc' at step 0 cannot become a float64" in caplog.text
    assert "step must be a whole number from 0 to 2**62, got -3" in caplog.text


def test_a_value_past_float64_is_dropped_alone_counted_and_warned(tracker: TrackerProcess, caplog) -> None:
    # 2**1024 once raised in the sender thread: the 501 points of the batch around it never arrived, and
    # finish() and lost_points both said 0.
    caplog.set_level(logging.WARNING, logger="plateau")
    with plateau.init(project="sdk", url=tracker.url) as run:
        for step in range(1000):
            run.log({"a": 2**1024 if step == 500 else float(step), "b": 1.0}, step=step)
        assert run.flush(20)
        run_id = run.id
    page = httpx.get(f"{tracker.url}/api/v1/runs/{run_id}/history", params={"key": "a", "limit": 2000}).json()
    assert [p["step"] for p in page["points"]] == [s for s in range(1000) if s != 500]
    assert run.invalid_points == 1
    assert "'a' = 179769313486231590772930519078902473361797697894230657273... at step 500" in caplog.text
    assert "cannot become a float64 (OverflowError)" in caplog.text


def test_changing_key_sets_and_other_mappings_keep_every_value_with_its_key(tracker: TrackerProcess) -> None:
    """Queued records share the keys of the call before when they are the same; any mix must still pair
    each value with its own key, whatever the mapping type and however the key set changes."""
    logged = [
        {"a": 1.0, "b": 2.0},
        {"a": 3.0, "b": 4.0},
        {"b": 5.0, "a": 6.0},  # same keys, another order
        MappingProxyType({"b": 7.0}),
        OrderedDict([("a", 8.0), ("c", 9.0)]),
        {"a": 10.0, "b": 11.0},
    ]
    with plateau.init(project="sdk", url=tracker.url) as run:
        for step, metrics in enumerate(logged):
            run.log(metrics, step=step)
        assert run.flush(10)
        read = {
            key: {
                p["step"]: p["value"]
                for p in httpx.get(f"{tracker.url}/api/v1/runs/{run.id}/history", params={"key": key}).json()[
                    "points"
                ]
            }
            for key in ("a", "b", "c")
        }
    expected = {key: {s: m[key] for s, m in enumerate(logged) if key in m} for key in ("a", "b", "c")}
    assert read == expected


def test_context_manager_marks_a_crash_as_failed(tracker: TrackerProcess) -> None:
    def crash_inside(run: plateau.Run) -> None:
        with run:
            run.log({"loss": 1.0})
            raise RuntimeError("boom")

    run = plateau.init(project="sdk", url=tracker.url)
    with pytest.raises(RuntimeError, match="boom"):
        crash_inside(run)
    assert httpx.get(f"{tracker.url}/api/v1/runs/{run.id}").json()["status"] == "failed"


def test_invalid_policy_fails_fast_at_init(tracker: TrackerProcess) -> None:
    with pytest.raises(ValueError, match="patience"):
        plateau.init(
            project="sdk", monitor="loss", rules=[{"rule": "patience", "patience": 0}], url=tracker.url
        )


def _time_logs(run: plateau.Run, count: int) -> list[float]:
    durations = []
    for step in range(count):
        started = time.perf_counter()
        run.log({"loss": 1.0, "acc": 0.5}, step=step)
        durations.append(time.perf_counter() - started)
    return durations


def test_log_with_the_server_down_is_fast_and_raises_nothing(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="plateau")
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.perf_counter()
    run = plateau.init(project="sdk", monitor="loss", url=url, wait=0.3)
    assert time.perf_counter() - started < 3
    durations = _time_logs(run, 20_000)
    # Generous bounds: the point is no network wait in log(), not a speed target (see the benchmarks).
    assert sum(durations) < 1.0
    assert sorted(durations)[len(durations) // 2] < 50e-6
    assert not run.should_stop()
    started = time.perf_counter()
    lost = run.finish(timeout=0.5)
    assert time.perf_counter() - started < 3
    assert lost == 0
    assert run.spooled_points == 40_000  # safe on disk for `plateau sync`
    assert caplog.text.count("cannot reach the tracker") == 1  # told once, clearly


@pytest.fixture
def hung_server() -> Iterator[str]:
    """Accepts connections and reads, but never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
                accepted.append(connection)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for connection in accepted:
        connection.close()
    listener.close()


def test_log_with_a_hung_server_is_fast(hung_server: str) -> None:
    run = plateau.init(project="sdk", monitor="loss", url=hung_server, wait=0.3)
    durations = _time_logs(run, 20_000)
    assert sum(durations) < 1.0
    started = time.perf_counter()
    run.finish(timeout=0.5)
    assert time.perf_counter() - started < 5


def test_points_logged_while_the_server_is_away_arrive_when_it_starts(tmp_path: Path) -> None:
    port = free_port()
    run = plateau.init(
        project="sdk", monitor="loss", mode="min", rules=PATIENCE_2, url=f"http://127.0.0.1:{port}", wait=0.2
    )
    assert run.id is None
    for step, value in enumerate([1.0, 0.5, 0.75, 0.75]):
        run.log({"loss": value}, step=step)
    server = TrackerProcess(tmp_path, port=port)
    try:
        assert wait_for(run.should_stop, timeout=30)
        assert run.latest.best_step == 1
        assert run.finish(timeout=10) == 0
    finally:
        server.stop()


def test_unfinished_run_is_flushed_and_finished_at_exit(tracker: TrackerProcess, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(f"""
        import plateau_tracker as plateau
        run = plateau.init(project="sdk", experiment="exit", url={tracker.url!r})
        for step in range(500):
            run.log({{"loss": 1.0 / (step + 1)}}, step=step)
        print(run.id)
    """)
    )
    output = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True
    )
    run_id = int(output.stdout.strip())
    stored = httpx.get(f"{tracker.url}/api/v1/runs/{run_id}").json()
    assert stored["status"] == "finished"
    history = httpx.get(f"{tracker.url}/api/v1/runs/{run_id}/history", params={"key": "loss"}).json()
    assert len(history["points"]) == 500


def test_sdk_imports_nothing_from_the_server_side() -> None:
    code = (
        "import sys, sdk\n"
        "heavy = {'tracker', 'fastapi', 'starlette', 'sqlalchemy', 'alembic', 'uvicorn', 'pydantic',\n"
        "         'torch'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert output.stdout.strip() == "[]"


def test_a_record_of_more_keys_than_a_batch_may_hold_is_split(tracker: TrackerProcess) -> None:
    with plateau.init(project="sdk", url=tracker.url) as run:
        run.log({f"layer{i}/grad_norm": float(i) for i in range(12_000)}, step=0)
        run.log({"loss": 1.0}, step=0)
        assert run.flush(60)
        run_id = run.id
    keys = httpx.get(f"{tracker.url}/api/v1/runs/{run_id}/keys", timeout=30).json()["keys"]
    assert len(keys) == 12_001
    assert run._sender.rejected_points == 0


def test_finish_says_what_is_left_in_the_spool_and_the_run_shows_it_until_sync(
    tracker: TrackerProcess, caplog, plateau_home
) -> None:
    # A loop faster than the link: finish()'s deadline passes with points still queued. They go to the
    # spool (not lost), and the user is told, in numbers, with the command that delivers them.
    caplog.set_level(logging.WARNING, logger="plateau")
    run = plateau.init(project="sdk", url=tracker.url, run_key=f"fast-{uuid.uuid4().hex[:6]}")
    for step in range(200_000):
        run.log({"loss": 1.0, "m": 2.0}, step=step)
    assert run.finish(timeout=0.2) == 0  # nothing lost: what is not on the tracker is in the spool
    match = re.search(
        r"(\d+) points of run (\d+) are in the spool at (\S+), not on the tracker yet", caplog.text
    )
    assert match, caplog.text
    waiting, run_id = int(match.group(1)), int(match.group(2))
    assert waiting > 0
    assert "run `plateau sync` to deliver them" in caplog.text
    summary = httpx.get(f"{tracker.url}/api/v1/runs/{run_id}/summary").json()["summary"]
    assert summary["undelivered_points"] == waiting
    report = plateau.sync(url=tracker.url)
    assert report.points == waiting
    assert (
        "undelivered_points" not in httpx.get(f"{tracker.url}/api/v1/runs/{run_id}/summary").json()["summary"]
    )
    for key in ("loss", "m"):
        page = httpx.get(
            f"{tracker.url}/api/v1/runs/{run_id}/history",
            params={"key": key, "limit": 100_000, "form": "columns"},
            timeout=30,
        ).json()
        steps = page["steps"]
        while page["next_step"] is not None:
            page = httpx.get(
                f"{tracker.url}/api/v1/runs/{run_id}/history",
                params={"key": key, "limit": 100_000, "form": "columns", "start_step": page["next_step"]},
                timeout=30,
            ).json()
            steps += page["steps"]
        assert steps == list(range(200_000))


def _default_stop(acc: list[float], companions: list[dict[str, float]], plan: int) -> tuple[int | None, str]:
    """Where the default policy stops ``acc`` (watched as ``val/acc``) given each step's companion keys:
    the pure engine, as the tracker runs it."""
    from plateau_tracker.server.policy import Context, Observation, PolicySpec, evaluate, initial_states

    policy = PolicySpec.model_validate({"monitor": "val/acc", "mode": "max"})
    observations = [Observation(i, a, 0.0, c) for i, (a, c) in enumerate(zip(acc, companions, strict=True))]
    evaluation = evaluate(policy, initial_states(policy), observations, Context(planned_steps=plan))
    stops = [v.rule for v in evaluation.verdicts if v.action == "stop"]
    return evaluation.stop_step, stops[0] if stops else ""


def test_keys_logged_after_the_monitored_value_at_its_step_are_judged_with_it(
    tracker: TrackerProcess,
) -> None:
    """A loop that logs the rate and the validation loss in a call after the accuracy's, at the same step,
    has the default judge each step with that step's rate: it stops where the same keys logged in one call
    stop it. Until 2026-11-26 the accuracy's batch went as it was logged, the tracker read the rate of the
    step before, and this run stopped one evaluation late (at the step the engine gives for rates one
    evaluation late, asserted to differ below, so this test can tell)."""
    n = 40
    # Climbs to step 22, then falls away from its best under a rate that decays to 30% of its peak at
    # step 28: held while the rate is high, stopped at the first step it is not.
    acc = [round(0.85 * (1 - math.exp(-0.2 * (min(i, 22) + 1))) - 0.03 * max(0, i - 22), 4) for i in range(n)]
    companions = [
        {"lr": 0.1 * (1 - i / n), "val_loss": round(1.5 * math.exp(-0.3 * min(i, 10)) + 0.3, 4)}
        for i in range(n)
    ]
    exact = _default_stop(acc, companions, n - 1)
    late = _default_stop(acc, [{}, *companions[:-1]], n - 1)
    assert exact[0] is not None
    assert late != exact
    with plateau.init(
        project="sdk", experiment="companions", monitor="val/acc", planned_steps=n - 1, url=tracker.url
    ) as run:
        stopped_at = None
        for step in range(n):
            run.log({"val/acc": acc[step]}, step=step)
            time.sleep(0.01)  # the loop's work in between: the scheduler's step, the loss's own evaluation
            run.log(companions[step], step=step)
            if run.should_stop():
                stopped_at = step
                break
        assert (stopped_at, run.latest.rule) == exact
    decisions = httpx.get(f"{tracker.url}/api/v1/runs/{run.id}/decisions").json()["data"]
    assert "companion_late" not in {d["rule"] for d in decisions}  # what the tracker says when it lags
