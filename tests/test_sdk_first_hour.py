"""The SDK when things go wrong in a newcomer's first hour: a tracker away costs a sweep no time, runs
trained offline end as their trainer ended them once synced, a policy typo is caught before training,
a run the tracker refuses can be corrected or dropped from the spool, and every error is said once,
naming the run and the URL."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

import plateau_tracker as plateau
from plateau_tracker._link import recently_unreachable
from plateau_tracker._policy_check import check_policy
from plateau_tracker.server.policy import PolicySpec
from plateau_tracker.server.policy.shape import render
from plateau_tracker.server.schemas.runs import RunCreate
from tests._server import TrackerProcess, free_port


def _offline_run(spool: Path, url: str, **kwargs: Any) -> plateau.Run:
    return plateau.init(project="first-hour", monitor="val", mode="min", url=url, spool_dir=spool, **kwargs)


def test_a_tracker_away_costs_a_sweep_no_time(tmp_path: Path) -> None:
    """Before: init waited 5 s and finish 10 s for every run, 15 s a run of a sweep."""
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens
    costs = []
    for index in range(3):
        started = time.perf_counter()
        run = _offline_run(tmp_path / "spool", url, run_key=f"sweep-{index}-{uuid.uuid4().hex[:6]}")
        for step in range(5):
            run.log({"val": 1.0 / (step + 1)}, step=step)
            run.should_stop()
        assert run.finish() == 0
        costs.append(time.perf_counter() - started)
    print(f"\ninit + 5 steps + finish, tracker away: {', '.join(f'{c:.3f} s' for c in costs)}")
    assert costs[0] < 2.0, costs
    assert max(costs[1:]) < 0.5, costs  # the process remembers the tracker is away


def test_sync_ends_offline_runs_with_their_status_and_time(tmp_path: Path) -> None:
    """Before: a synced run stayed `running` forever with ended_at null."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    key = f"offline-{uuid.uuid4().hex[:6]}"
    run = _offline_run(tmp_path / "spool", url, run_key=key)
    for step in range(10):
        run.log({"val": 1.0 / (step + 1)}, step=step)
    finished_at = datetime.now(timezone.utc)
    run.finish("failed")
    assert (tmp_path / "spool" / key / "finish.json").exists()
    time.sleep(1.1)  # the tracker's own clock must not be what ended the run
    server = TrackerProcess(tmp_path / "server", port=port)
    try:
        report = plateau.sync(tmp_path / "spool")
        assert (report.runs, report.points, report.finished, report.left) == (1, 10, 1, 0)
        runs = httpx.get(f"{url}/api/v1/runs", params={"project": "first-hour"}).json()["data"]
        (stored,) = [r for r in runs if r["run_key"] == key]
        assert stored["status"] == "failed"
        ended = datetime.fromisoformat(stored["ended_at"])
        ended = ended if ended.tzinfo else ended.replace(tzinfo=timezone.utc)
        assert abs((ended - finished_at).total_seconds()) < 1.0
        assert not (tmp_path / "spool" / key).exists()  # all delivered: the folder is gone
    finally:
        server.stop()


def test_a_run_that_goes_on_in_a_new_process_forgets_the_earlier_finish(
    tracker: TrackerProcess, tmp_path: Path
) -> None:
    key = f"resumed-{uuid.uuid4().hex[:6]}"
    run = _offline_run(tmp_path / "spool", f"http://127.0.0.1:{free_port()}", run_key=key)
    run.log({"val": 1.0}, step=0)
    run.finish()
    resumed = _offline_run(tmp_path / "spool", tracker.url, run_key=key)
    resumed.log({"val": 0.5}, step=1)
    assert resumed.flush(10)
    assert not (tmp_path / "spool" / key / "finish.json").exists()
    status = httpx.get(f"{tracker.url}/api/v1/runs/{resumed.id}").json()["status"]
    assert status == "running"
    resumed.finish()


TYPOS = [
    ([{"rule": "patiance", "patience": 5}], "unknown rule 'patiance' (did you mean 'patience'?)"),
    ([{"rule": "patience", "patients": 5}], "no parameter 'patients' (did you mean 'patience'?)"),
    ([{"rule": "patience", "patience": "five"}], "patience = 'five' is not a whole number >= 1"),
    ([{"rule": "patience", "patience": 0}], "patience = 0 is not a whole number >= 1"),
    ([{"rule": "plateau", "test": "tost2"}], "one of 'tost', 'mann_kendall'"),
    ([{"rule": "threshold"}], "stop_at is required"),
    ([], "rules is an empty list, so nothing would be judged"),
    ([{"patience": 5}], "unknown rule None"),
    (["patience"], "must be a mapping"),
    ([{"rule": "outlook", "loss_key": []}], "loss_key = [] is not a string or a list of at least 1 items"),
    (
        [{"rule": "outlook", "lr_key": ["lr"] * 17}],
        "or a list of at least 1 items and of at most 16 items",
    ),
]


@pytest.mark.parametrize(("rules", "message"), TYPOS)
def test_a_policy_typo_is_caught_before_training_with_the_tracker_away(
    tmp_path: Path, rules: list[Any], message: str
) -> None:
    started = time.perf_counter()
    with pytest.raises(ValueError, match="invalid policy") as raised:
        _offline_run(tmp_path / "spool", f"http://127.0.0.1:{free_port()}", rules=rules)
    assert message in str(raised.value)
    assert time.perf_counter() - started < 0.5
    assert not (tmp_path / "spool").exists()  # nothing spooled that sync would choke on


def test_the_sdk_refuses_what_the_tracker_refuses_and_nothing_it_takes() -> None:
    """The SDK's shape check never refuses a policy the tracker takes, and catches every typo above."""
    accepted = [
        [{"rule": "patience", "patience": "5", "min_delta": 1, "relative": "true"}],
        [{"rule": "patience", "patience": 5.0}, {"rule": "checkpoint"}, {"rule": "non_finite"}],
        [{"rule": "plateau", "window": 200, "test": "mann_kendall", "ema": 0.5}],
        [{"rule": "threshold", "stop_at": -1e300}],
        [{"rule": "asha", "reduction_factor": 2, "min_step": 1}],
        [{"rule": "outlook"}, {"rule": "perfect"}, {"rule": "divergence", "run_factor": 10}],
        [{"rule": "percentile", "warmup_steps": 2}],  # warmup's old name
        [{"rule": "outlook", "lr_key": ["lr", "learning_rate"], "loss_key": "val/loss"}],  # names, or one
    ]
    for rules in accepted:
        policy = {"monitor": "val", "mode": "min", "rules": rules}
        PolicySpec.model_validate(policy)  # the tracker takes it
        check_policy(policy)  # so must the SDK
    for rules, _ in TYPOS:
        policy = {"monitor": "val", "mode": "min", "rules": rules}
        with pytest.raises(ValidationError):
            RunCreate.model_validate({"project": "p", "policy": policy})
        with pytest.raises(ValueError, match="invalid policy"):
            check_policy(policy)


def test_the_sdk_reads_a_renamed_parameter_as_the_tracker_does() -> None:
    both = {"monitor": "val", "rules": [{"rule": "percentile", "warmup": 2, "warmup_steps": 2}]}
    with pytest.raises(ValidationError):
        PolicySpec.model_validate(both)
    with pytest.raises(ValueError, match="names 'warmup' twice"):
        check_policy(both)
    with pytest.raises(ValueError, match="warmup_steps = -1 is not"):
        check_policy({"monitor": "val", "rules": [{"rule": "percentile", "warmup_steps": -1}]})


def test_the_sdk_carries_the_trackers_policy_shape() -> None:
    """Regenerate with `python -m plateau_tracker.server.policy.shape > sdk/policy_shape.json` when a rule
    changes."""
    carried = (Path(plateau.__file__).parent / "policy_shape.json").read_text()
    assert carried == render()


def test_empty_rules_are_refused_by_the_api_naming_the_field(client: httpx.Client) -> None:
    answer = client.post("/api/v1/runs", json={"project": "p", "policy": {"monitor": "v", "rules": []}})
    assert answer.status_code == 422
    assert "rules is an empty list" in answer.text
    assert "policy" in json.dumps(answer.json()["detail"][0]["loc"])


def _spool_refused_run(spool: Path, key: str) -> None:
    """A run whose policy passes the SDK's shape check but not the tracker (a check across fields),
    trained while the tracker was away."""
    run = plateau.init(
        project="first-hour",
        monitor="val/acc",
        mode="max",
        rules=[{"rule": "prechelt"}],
        url=f"http://127.0.0.1:{free_port()}",
        spool_dir=spool,
        run_key=key,
    )
    for step in range(4):
        run.log({"val/acc": step / 4}, step=step)
    run.finish()


def test_sync_says_how_to_correct_or_drop_a_refused_run(tracker: TrackerProcess, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    fixed, dropped = f"fix-{uuid.uuid4().hex[:6]}", f"drop-{uuid.uuid4().hex[:6]}"
    _spool_refused_run(spool, fixed)
    _spool_refused_run(spool, dropped)

    def plateau_sync(*args: str) -> subprocess.CompletedProcess[str]:
        command = [
            sys.executable,
            "-m",
            "plateau_tracker",
            "sync",
            "--spool",
            str(spool),
            "--url",
            tracker.url,
        ]
        return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60)

    refused = plateau_sync()
    assert refused.returncode == 1
    assert f"plateau sync --drop {fixed}" in refused.stderr
    assert f"plateau sync --policy {fixed}=default" in refused.stderr
    assert refused.stderr.count("prechelt needs") == 2  # once per run, not twice
    corrected = plateau_sync("--policy", f"{fixed}=patience-3", "--drop", dropped)
    assert corrected.returncode == 0, corrected.stderr
    assert "4 points in 1 batches of 1 runs sent (1 runs ended" in corrected.stdout
    assert "1 runs dropped unsent" in corrected.stdout
    assert not spool.exists() or not any(spool.iterdir())
    runs = httpx.get(f"{tracker.url}/api/v1/runs", params={"project": "first-hour", "limit": 1000}).json()
    (stored,) = [r for r in runs["data"] if r["run_key"] == fixed]
    assert stored["policy"]["mode"] == "max"
    assert [r["rule"] for r in stored["policy"]["rules"]] == ["patience", "checkpoint", "non_finite"]
    assert stored["status"] == "finished"
    assert not [r for r in runs["data"] if r["run_key"] == dropped]


def test_sync_corrects_a_mode_that_contradicts_the_monitors_name(
    tracker: TrackerProcess, tmp_path: Path
) -> None:
    """A run spooled watching ``val/loss`` in mode max: re-sent under another policy it would keep its
    worst value, so ``--policy`` alone is refused, naming ``--mode``; with ``--mode`` it is sent corrected."""
    spool = tmp_path / "spool"
    key = f"mode-{uuid.uuid4().hex[:6]}"
    with pytest.warns(UserWarning, match="whose name says it improves downwards"):
        run = plateau.init(
            project="first-hour",
            monitor="val/loss",
            mode="max",
            rules=[{"rule": "prechelt"}],  # needs mode min: the tracker refuses the run
            url=f"http://127.0.0.1:{free_port()}",
            spool_dir=spool,
            run_key=key,
        )
    for step, value in enumerate([1.0, 0.5, 0.4, 0.6]):
        run.log({"val/loss": value}, step=step)
    run.finish()
    command = [sys.executable, "-m", "plateau_tracker", "sync", "--spool", str(spool), "--url", tracker.url]

    def sync(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60)

    refused = sync("--policy", f"{key}=default")
    assert refused.returncode == 1
    assert f"give --mode {key}=min to correct it" in refused.stderr
    assert any(spool.iterdir())
    assert sync("--mode", f"{key}=up").returncode == 1
    corrected = sync("--policy", f"{key}=patience-3", "--mode", f"{key}=min")
    assert corrected.returncode == 0, corrected.stderr
    runs = httpx.get(f"{tracker.url}/api/v1/runs", params={"project": "first-hour", "limit": 1000}).json()
    (stored,) = [r for r in runs["data"] if r["run_key"] == key]
    assert stored["policy"]["mode"] == "min"
    checkpoints = httpx.get(f"{tracker.url}/api/v1/runs/{stored['id']}/decisions").json()["data"]
    assert [d["step"] for d in checkpoints if d["action"] == "checkpoint"] == [0, 1, 2]


def test_a_refused_policy_is_said_once(tracker: TrackerProcess, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="plateau")
    with pytest.raises(ValueError, match="prechelt needs") as raised:
        plateau.init(project="p", monitor="acc", mode="max", rules=[{"rule": "prechelt"}], url=tracker.url)
    assert "prechelt needs" not in caplog.text  # the exception says it; the log does not repeat it
    assert str(raised.value).count("prechelt needs") == 1


def test_a_url_that_is_not_the_trackers_base_says_what_to_give(tracker: TrackerProcess) -> None:
    with pytest.raises(ValueError, match=re.escape("without /api/v1, like http://127.0.0.1:8765")):
        plateau.init(project="p", url=f"{tracker.url}/api/v1", spool=False)
    with pytest.raises(ValueError, match=r"bad port in the tracker URL 'http://127.0.0.1:99999'"):
        plateau.init(project="p", url="http://127.0.0.1:99999")


def test_a_run_not_created_yet_is_named_by_its_key(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="plateau")
    key = f"named-{uuid.uuid4().hex[:6]}"
    run = _offline_run(tmp_path / "spool", f"http://127.0.0.1:{free_port()}", run_key=key)
    run.log({"val": 1.0}, step=0)
    run.finish()
    assert f"1 points of run '{key}' (not created yet) are in the spool" in caplog.text
    assert "run None" not in caplog.text


def test_plateau_offline_sends_nothing_judges_locally_and_syncs_later(
    tracker: TrackerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With ``PLATEAU_OFFLINE=1`` a run never reaches for its tracker, though one answers at its URL: its
    checkpoint and stop come from the SDK's own judge, its points wait in the spool, and ``plateau sync``
    delivers them."""
    monkeypatch.setenv("PLATEAU_OFFLINE", "1")
    key = f"offline-by-choice-{uuid.uuid4().hex[:6]}"
    rules = [{"rule": "patience", "patience": 2}, {"rule": "checkpoint"}]
    values = [1.0, 0.5, 0.4, 0.6, 0.7, 0.3]
    started = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="plateau_tracker"):
        run = _offline_run(tmp_path / "spool", tracker.url, run_key=key, rules=rules)
    checkpoints, stopped_at = [], None
    for step, value in enumerate(values):
        run.log({"val": value}, step=step)
        if run.should_checkpoint():
            checkpoints.append(step)
        if run.should_stop():
            stopped_at = step
            break
    run.finish()
    took = time.perf_counter() - started
    assert (checkpoints, stopped_at) == ([0, 1, 2], 4)
    assert took < 2.0, took  # no wait for a tracker it does not try to reach
    assert "PLATEAU_OFFLINE is set" in caplog.text
    project_runs = httpx.get(f"{tracker.url}/api/v1/runs", params={"project": "first-hour"}).json()["data"]
    assert key not in {r["run_key"] for r in project_runs}
    # Staying offline by choice says nothing of the tracker: the process's next run at that URL waits for
    # it as usual, instead of going on at once as from a tracker found away.
    assert not recently_unreachable(tracker.url)

    report = plateau.sync(tmp_path / "spool", url=tracker.url)
    assert (report.runs, report.points, report.left) == (1, 5, 0)
    project_runs = httpx.get(f"{tracker.url}/api/v1/runs", params={"project": "first-hour"}).json()["data"]
    (stored,) = [r for r in project_runs if r["run_key"] == key]
    assert stored["status"] == "stopped"


def test_plateau_disabled_keeps_nothing_but_still_marks_each_new_best(
    tracker: TrackerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With ``PLATEAU_DISABLED=1`` nothing reaches the tracker nor the disk and nothing queues in memory, in
    a loop a hundred thousand steps long; ``should_checkpoint()`` still marks each new best, so a loop that
    saves on it keeps its best model, and the warning says why nothing was sent, once."""
    monkeypatch.setenv("PLATEAU_DISABLED", "1")
    monkeypatch.setenv("PLATEAU_HOME", str(tmp_path / "home"))
    key = f"disabled-{uuid.uuid4().hex[:6]}"
    rules = [{"rule": "patience", "patience": 2}, {"rule": "checkpoint"}]
    with caplog.at_level(logging.WARNING):
        run = plateau.init(
            project="first-hour", monitor="val", mode="min", url=tracker.url, run_key=key, rules=rules
        )
    for step in range(100_000):
        run.log({"train_loss": 1.0, "val": 2.0}, step=step)
    assert run._sender.unsent_points() == 0  # nothing queued in memory either
    checkpoints = []
    for step, value in enumerate([1.0, 0.5, 0.6, 0.4], start=100_000):
        run.log({"val": value}, step=step)
        if run.should_checkpoint():
            checkpoints.append(step)
    finishing = time.perf_counter()
    assert run.finish() == 0
    assert time.perf_counter() - finishing < 2.0  # nothing to flush: no wait for the exit timeout
    assert checkpoints == [100_000, 100_001, 100_003]
    assert caplog.text.count("PLATEAU_DISABLED is set") <= 1
    assert "cannot reach the tracker" not in caplog.text
    assert "has not judged" not in caplog.text  # it never will: that is said once, by the warning above
    assert "dropping points" not in caplog.text
    runs = httpx.get(f"{tracker.url}/api/v1/runs", params={"project": "first-hour"}).json()["data"]
    assert key not in {r["run_key"] for r in runs}
    assert not (tmp_path / "home" / "spool").exists() or not any((tmp_path / "home" / "spool").iterdir())
