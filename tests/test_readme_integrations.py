"""The README's Lightning, Keras and Optuna blocks, each run as written with the framework's real loop on a
tiny CPU model (the names a block leaves to the user, ``model``, ``x``, ``train_loader``, ``objective``,
are given here): each stops where Plateau's stop came and ends holding Plateau's best."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import numpy as np
import pytest
import torch

from tests._server import TrackerProcess
from tests.test_integration_transformers import readme_block

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is imported: this machine has torch only
pytest.importorskip("lightning")
pytest.importorskip("keras")
pytest.importorskip("optuna")

pytestmark = [
    pytest.mark.slow,
    # Keras's torch backend hands numpy an __array__ without the copy keyword (keras, not Plateau).
    pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword"),
    # A block as a user runs it: Lightning's advice about dataloader workers and CPU-only machines, and
    # its calls of torch pytree APIs that torch 2.13 deprecates, are not these tests' business.
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

# Falls to its best at epoch 10, then climbs steadily: a run the default policy stops well before 40.
SCRIPT = [1.0 - 0.05 * e if e <= 10 else 0.5 + 0.03 * (e - 10) for e in range(40)]


@pytest.fixture
def tracker(tmp_path: Path) -> Iterator[TrackerProcess]:
    """A tracker of the test's own: each block names its project, and the shared tracker's may hold others'
    runs in it."""
    server = TrackerProcess(tmp_path / "tracker")
    yield server
    server.stop()


def _only_run(url: str, project: str) -> dict[str, Any]:
    (run,) = httpx.get(f"{url}/api/v1/runs", params={"project": project}).json()["data"]
    return dict(run)


def _weights_of(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}


def test_the_lightning_block_stops_at_plateaus_stop_and_loads_its_best(
    tracker: TrackerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests._lightning_module import Scripted, loaders

    class Snapshots(Scripted):
        """The module as a user's, which also remembers its weights at each validation."""

        seen: ClassVar[dict[int, dict[str, torch.Tensor]]] = {}

        def on_validation_epoch_end(self) -> None:
            Snapshots.seen[self.current_epoch] = _weights_of(self)

    monkeypatch.setenv("PLATEAU_URL", tracker.url)
    monkeypatch.chdir(tmp_path)
    train_loader, val_loader = loaders()
    namespace: dict[str, Any] = {
        "model": Snapshots(SCRIPT),
        "train_loader": train_loader,
        "val_loader": val_loader,
    }
    exec(compile(readme_block("integrations.lightning"), "README.md", "exec"), namespace)

    run = _only_run(tracker.url, "digits")
    assert run["status"] == "stopped"
    stop, best_step = run["stop_step"], run["decision"]["best_step"]
    assert namespace["trainer"].current_epoch == stop + 1  # the stop epoch completed, no epoch after it
    assert best_step == SCRIPT.index(min(SCRIPT))
    best = namespace["best"]
    assert torch.load(namespace["plateau_callback"].best_model_path, weights_only=False)["epoch"] == best_step
    expected = Snapshots.seen[best_step]
    assert all(torch.equal(tensor, expected[name]) for name, tensor in _weights_of(best).items())


def test_the_keras_block_stops_at_plateaus_stop_and_restores_its_best(
    tracker: TrackerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    import keras  # type: ignore[import-untyped]

    seen: dict[int, list[np.ndarray]] = {}

    class Snapshot(keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_end(self, epoch: int, logs: object = None) -> None:
            seen[epoch] = [w.copy() for w in self.model.get_weights()]

    class UsersModel(keras.Sequential):  # type: ignore[misc]
        """A user's model; ``fit`` also remembers the weights at each epoch's end, before Plateau's."""

        def fit(self, *args: Any, callbacks: list[Any], **kwargs: Any) -> Any:
            return super().fit(*args, callbacks=[Snapshot(), *callbacks], **kwargs)

    monkeypatch.setenv("PLATEAU_URL", tracker.url)
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 4)).astype("float32")
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], dtype="float32"))[:, None] + rng.normal(size=(96, 1)).astype(
        "float32"
    )
    model = UsersModel([keras.Input((4,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    namespace: dict[str, Any] = {"model": model, "x": x, "y": y}
    exec(compile(readme_block("integrations.keras"), "README.md", "exec"), namespace)

    run = _only_run(tracker.url, "tabular")
    epochs = len(seen)
    if run["status"] == "stopped":
        assert epochs == run["stop_step"] + 1
    else:
        assert epochs == 40
    best_step = run["decision"]["best_step"]
    for restored, expected in zip(model.get_weights(), seen[best_step], strict=True):
        np.testing.assert_array_equal(restored, expected)


def test_the_optuna_block_prunes_where_plateau_decides(
    tracker: TrackerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    import optuna

    reported: dict[int, int] = {}

    def objective(trial: optuna.Trial) -> float:
        """Even trials learn; odd ones sit high: the sweep's cross-run rules prune them."""
        rate = trial.suggest_float("lr", 1e-3, 1.0, log=True)
        value = 1.0
        for step in range(20):
            value = 1.0 / (1 + step * rate) if trial.number % 2 == 0 else 5.0 - 0.01 * step
            trial.report(value, step)
            reported[trial.number] = step
            if trial.should_prune():
                raise optuna.TrialPruned()
        return value

    monkeypatch.setenv("PLATEAU_URL", tracker.url)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    namespace: dict[str, Any] = {"objective": objective}
    exec(compile(readme_block("integrations.optuna"), "README.md", "exec"), namespace)

    study = namespace["study"]
    runs = httpx.get(f"{tracker.url}/api/v1/runs", params={"experiment": study.study_name}).json()["data"]
    by_trial = {int(r["run_key"].rsplit("-", 1)[1]): r for r in runs}
    assert sorted(by_trial) == list(range(12))
    pruned = [t.number for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    assert pruned, "the sweep pruned nothing"
    for trial in study.trials:
        run = by_trial[trial.number]
        if trial.number in pruned:
            assert (run["status"], run["stop_step"]) == ("stopped", reported[trial.number])
        else:
            assert run["stop_step"] is None
