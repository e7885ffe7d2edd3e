"""The README's Quickstart loop, run as written: it saves exactly the best epoch's network and leaves at
exactly the stop step; with the tracker unreachable or hung, it never waits more than the bound."""

from __future__ import annotations

import math
import os
import random
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tests._server import TrackerProcess, free_port

README = Path(__file__).resolve().parents[1] / "README.md"
PATIENCE = 5  # the Quickstart's rules: patience 5, checkpoint, non_finite; val/loss, mode min


def _first_python_after(marker: str) -> str:
    """The first Python block of the README after ``marker``."""
    text = README.read_text()
    match = re.search(r"```python\n(.*?)```", text[text.index(marker) :], re.S)
    assert match is not None
    return match.group(1)


def _exec_in(code: str, namespace: dict[str, Any], folder: Path) -> None:
    """Run a README loop as written, in ``folder`` (where it saves ``best.pt``)."""
    cwd = Path.cwd()
    os.chdir(folder)
    try:
        exec(compile(code, str(README), "exec"), namespace)
    finally:
        os.chdir(cwd)


def quickstart_code() -> str:
    return _first_python_after("## Quickstart")


class Model:
    """Stands for the user's network: its state is the epoch it has trained to."""

    def __init__(self) -> None:
        self.epoch = -1

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": torch.tensor(self.epoch)}


def run_quickstart(values: list[float], folder: Path, on_epoch: Any = None) -> dict[str, Any]:
    """Exec the Quickstart in ``folder`` with an instant ``train_and_validate`` that returns ``values``."""
    model = Model()
    times: list[float] = []

    def train_and_validate(net: Model) -> float:
        net.epoch += 1
        times.append(time.perf_counter())
        if on_epoch is not None:
            on_epoch(net.epoch)
        return values[net.epoch]

    namespace: dict[str, Any] = {"train_and_validate": train_and_validate, "model": model}
    _exec_in(quickstart_code(), namespace, folder)
    saved = folder / "best.pt"
    return {
        "left_at": namespace["epoch"],
        "saved": int(torch.load(saved)["epoch"]) if saved.exists() else None,
        "run": namespace["run"],
        "times": times,
    }


def expected(values: list[float]) -> tuple[int | None, int | None]:
    """(stop step, best step) under patience 5 + checkpoint + non_finite, mode min, as Lightning counts."""
    best, best_step, wait = None, None, 0
    for step, value in enumerate(values):
        if not math.isfinite(value):
            return step, best_step
        if best is None or value < best:
            best, best_step, wait = value, step, 0
            continue
        wait += 1
        if wait >= PATIENCE:
            return step, best_step
    return None, best_step


def random_curve(rng: random.Random) -> list[float]:
    """A noisy decreasing loss on a coarse grid (ties happen), sometimes with a NaN or an inf."""
    level = rng.uniform(1.0, 3.0)
    values = []
    for _ in range(100):
        level *= rng.uniform(0.9, 1.02)
        values.append(round(level + rng.gauss(0, 0.05), 2))
    if rng.random() < 0.1:
        values[rng.randrange(5, 100)] = rng.choice([math.nan, math.inf])
    return values


@pytest.fixture
def quickstart_env(monkeypatch: pytest.MonkeyPatch, tracker: TrackerProcess) -> TrackerProcess:
    monkeypatch.setenv("PLATEAU_URL", tracker.url)
    return tracker


@pytest.mark.slow
def test_the_quickstart_loop_saves_the_best_epoch_and_leaves_at_the_stop(
    quickstart_env: TrackerProcess, tmp_path: Path
) -> None:
    rng = random.Random(17)
    stops = 0
    for index in range(100):
        values = random_curve(rng)
        folder = tmp_path / f"seq{index}"
        folder.mkdir()
        outcome = run_quickstart(values, folder)
        stop_step, best_step = expected(values)
        run = outcome["run"]
        assert outcome["left_at"] == (99 if stop_step is None else stop_step), (index, values)
        assert outcome["saved"] == best_step, (index, values)
        if stop_step is not None:
            stops += 1
            assert (run.latest.action, run.latest.step, run.latest.best_step) == (
                "stop",
                stop_step,
                best_step,
            )
    assert stops > 50  # the sequences exercise stops, not only full runs


def test_the_quickstart_loop_goes_on_unblocked_without_a_tracker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PLATEAU_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    values = [1.0 - 0.001 * i for i in range(100)]
    outcome = run_quickstart(values, tmp_path)
    assert outcome["left_at"] == 99  # always improving: training runs its course
    assert outcome["saved"] == 99  # the SDK's own checkpoint verdicts, while no tracker answers
    looped = outcome["times"][-1] - outcome["times"][0]
    assert looped < 1.0  # offline, should_stop()/should_checkpoint() never wait
    assert outcome["run"].spooled_points == 100


@pytest.mark.parametrize("seed", range(10))
def test_without_a_tracker_the_loop_keeps_the_best_and_leaves_at_the_stop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, seed: int
) -> None:
    """No tracker at all, the most likely first mistake: the SDK judges the Quickstart's rules itself, so
    ``best.pt`` holds the best epoch and the loop leaves where patience 5 (or a NaN) stops it."""
    monkeypatch.setenv("PLATEAU_URL", f"http://127.0.0.1:{free_port()}")
    values = random_curve(random.Random(1000 + seed))
    stop_step, best_step = expected(values)
    outcome = run_quickstart(values, tmp_path)
    assert outcome["left_at"] == (99 if stop_step is None else stop_step)
    assert outcome["saved"] == best_step
    latest = outcome["run"].latest
    if stop_step is not None:
        assert (latest.action, latest.step, latest.best_step) == ("stop", stop_step, best_step)
        assert latest.evidence == {"judged_by": "sdk"}


@pytest.mark.slow
def test_a_hung_tracker_costs_the_loop_one_bound_at_most(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server = TrackerProcess(tmp_path / "hung")
    monkeypatch.setenv("PLATEAU_URL", server.url)

    def hang_then_resume(epoch: int) -> None:
        if epoch == 3:
            os.kill(server.process.pid, signal.SIGSTOP)
        if epoch == 99:
            os.kill(server.process.pid, signal.SIGCONT)

    try:
        values = [1.0 - 0.001 * i for i in range(100)]  # always improving: no stop
        outcome = run_quickstart(values, tmp_path, on_epoch=hang_then_resume)
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        server.stop()
    times = outcome["times"]
    waited = times[99] - times[3]
    bound = outcome["run"].decision_timeout
    assert bound <= waited < bound + 1.0  # one verdict waited for up to the bound, then no more waiting
    assert outcome["left_at"] == 99
    # While it hung, the SDK judged the checkpoints itself: the last epoch, the best, is the one saved.
    assert outcome["saved"] == 99


def default_loop_code() -> str:
    """The Quickstart's second loop: the default policy, with the plan, the rate and the losses."""
    return _first_python_after("**With the default policy**")


def test_the_default_policys_loop_keeps_the_best_epoch_and_logs_each_epochs_rate(
    quickstart_env: TrackerProcess, tmp_path: Path
) -> None:
    """The README's default-policy loop, as written, around a real network on scikit-learn's digits under
    a cosine schedule: ``best.pt`` holds exactly the weights of ``run.latest.best_step``, the loop leaves at
    the stop, the stored rate of each epoch is the one it trained at, and nothing is said about what the
    loop sent (no ``blind``, ``companion_*`` or ``late`` alert)."""
    import httpx
    from sklearn.datasets import load_digits

    import plateau_tracker as plateau

    x_all, y_all = load_digits(return_X_y=True)
    x = torch.tensor(x_all / 16.0, dtype=torch.float32)
    y = torch.tensor(y_all)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train, val = order[:1200], order[1200:]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    epochs = 60
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    weights: list[dict[str, torch.Tensor]] = []  # each epoch's network, as validated
    rates: list[float] = []  # the rate each epoch trained at

    def train_one_epoch(net: torch.nn.Module, opt: torch.optim.Optimizer) -> float:
        rates.append(opt.param_groups[0]["lr"])
        net.train()
        for start in range(0, len(train), 64):
            batch = train[start : start + 64]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(x[batch]), y[batch])
            loss.backward()
            opt.step()
        return loss.item()

    def validate(net: torch.nn.Module) -> tuple[float, float]:
        net.eval()
        weights.append({k: v.clone() for k, v in net.state_dict().items()})
        with torch.no_grad():
            out = net(x[val])
        return float(torch.nn.functional.cross_entropy(out, y[val])), float(
            (out.argmax(1) == y[val]).float().mean()
        )

    namespace: dict[str, Any] = {
        "plateau": plateau,
        "torch": torch,
        "model": model,
        "optimizer": optimizer,
        "scheduler": scheduler,
        "epochs": epochs,
        "train_one_epoch": train_one_epoch,
        "validate": validate,
    }
    _exec_in(default_loop_code(), namespace, tmp_path)
    run = namespace["run"]
    left_at = namespace["epoch"]
    assert (run.latest.action, run.latest.step) == ("stop", left_at)  # it stopped, and left at the stop
    assert left_at < epochs - 1
    saved = torch.load(tmp_path / "best.pt")
    best = run.latest.best_step
    assert all(torch.equal(saved[k], weights[best][k]) for k in saved)
    stored = httpx.get(f"{quickstart_env.url}/api/v1/runs/{run.id}/history", params={"key": "lr"}).json()
    assert [p["step"] for p in stored["points"]] == list(range(left_at + 1))
    assert [p["value"] for p in stored["points"]] == pytest.approx(rates)
    decisions = httpx.get(f"{quickstart_env.url}/api/v1/runs/{run.id}/decisions").json()["data"]
    assert [d["rule"] for d in decisions if d["action"] == "alert"] == []
