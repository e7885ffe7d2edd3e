"""``run.watch_optimizer(optimizer)``: the rate each epoch trained at, logged with the monitored metric,
from a real torch optimizer under a real scheduler, stored by a real tracker."""

from __future__ import annotations

import httpx
import pytest

import plateau_tracker as plateau
from tests._server import TrackerProcess

torch = pytest.importorskip("torch")


def _stored(tracker: TrackerProcess, run_id: int, key: str) -> list[tuple[int, float]]:
    history = httpx.get(f"{tracker.url}/api/v1/runs/{run_id}/history", params={"key": key}).json()
    return [(p["step"], p["value"]) for p in history["points"]]


def test_each_epoch_is_logged_with_the_rate_it_trained_at(tracker: TrackerProcess) -> None:
    """A step decay (x0.1 every 2 epochs): the hook reads each epoch's rate after its last optimizer step,
    before the scheduler's; the same loop reading ``param_groups`` after ``scheduler.step()`` logs the next
    epoch's rate, each decay an epoch early. Only calls that carry the monitored metric get the rate, and a
    call that logs ``lr`` itself keeps its own."""
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1)
    x, y = torch.randn(8, 2), torch.randn(8, 1)
    read_after_the_scheduler = []
    with plateau.init(
        project="rate", monitor="val/acc", mode="max", rules=[{"rule": "checkpoint"}], url=tracker.url
    ) as run:
        run.watch_optimizer(optimizer)
        for epoch in range(6):
            for _ in range(3):
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
            scheduler.step()
            read_after_the_scheduler.append(optimizer.param_groups[0]["lr"])
            run.log({"train/loss": 1.0 / (epoch + 1)}, step=epoch)  # no monitored metric: no rate
            if epoch < 5:
                run.log({"val/acc": 0.5 + epoch / 100}, step=epoch)
            else:
                run.log({"val/acc": 0.55, "lr": 7.0}, step=epoch)  # the loop's own rate wins
            run.should_checkpoint()
    stored = _stored(tracker, run.id, "lr")
    assert [s for s, _ in stored] == [0, 1, 2, 3, 4, 5]
    assert [v for _, v in stored] == pytest.approx([0.1, 0.1, 0.01, 0.01, 0.001, 7.0])
    assert read_after_the_scheduler[:5] == pytest.approx([0.1, 0.01, 0.01, 0.001, 0.001])


def test_watching_something_else_than_an_optimizer_is_refused_at_once(tracker: TrackerProcess) -> None:
    with plateau.init(project="rate", monitor="val/acc", mode="max", url=tracker.url) as run:
        with pytest.raises(TypeError, match="takes a torch optimizer"):
            run.watch_optimizer(torch.nn.Linear(2, 1))
        run.log({"val/acc": 0.5}, step=0)  # the run goes on, with no rate
    assert _stored(tracker, run.id, "lr") == []


def test_a_second_watch_replaces_the_first(tracker: TrackerProcess) -> None:
    first = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.5)
    second = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.25)
    with plateau.init(project="rate", monitor="val/acc", mode="max", url=tracker.url) as run:
        run.watch_optimizer(first)
        run.watch_optimizer(second)
        first.step()
        second.step()
        run.log({"val/acc": 0.5}, step=0)
        first.param_groups[0]["lr"] = 9.0
        first.step()  # no longer watched
        run.log({"val/acc": 0.6}, step=1)
    assert [v for _, v in _stored(tracker, run.id, "lr")] == [0.25, 0.25]


def test_an_accelerate_optimizer_is_watched_through_the_optimizer_it_wraps(tracker: TrackerProcess) -> None:
    """Accelerate's ``AcceleratedOptimizer`` does not initialise torch's ``Optimizer``: a hook registered on
    it failed (``AttributeError``), and its ``step()`` would not run one. The rate is read from the
    optimizer it wraps, at each step it really takes: with two batches accumulated per step, as often."""
    accelerate = pytest.importorskip("accelerate")
    torch.manual_seed(0)
    accelerator = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    x, y = torch.randn(8, 2), torch.randn(8, 1)
    with plateau.init(
        project="rate", monitor="val/acc", mode="max", rules=[{"rule": "checkpoint"}], url=tracker.url
    ) as run:
        run.watch_optimizer(optimizer)
        for epoch in range(4):
            for _ in range(4):  # two optimizer steps an epoch
                with accelerator.accumulate(model):
                    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                    optimizer.zero_grad()
            scheduler.step()
            run.log({"val/acc": 0.5 + epoch / 100}, step=epoch)
            run.should_checkpoint()
    stored = _stored(tracker, run.id, "lr")
    assert [s for s, _ in stored] == [0, 1, 2, 3]
    assert [v for _, v in stored] == pytest.approx([0.1, 0.1, 0.01, 0.01])
