"""PlateauCallback in a real Keras 3 ``fit`` on the PyTorch backend, against a real tracker. As in the
Transformers test, the policy makes the verdicts certain: the first epoch is the best, the third the stop."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import httpx
import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is imported: this machine has torch only
keras = pytest.importorskip("keras")

from plateau_tracker.integrations.keras import PlateauCallback  # noqa: E402
from tests._server import TrackerProcess  # noqa: E402

# Keras's torch backend hands numpy an __array__ without the copy keyword (keras, not Plateau): numpy 2 warns.
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword")

RULES = [{"rule": "patience", "patience": 2, "min_delta": 1e6}, {"rule": "checkpoint", "min_delta": 1e6}]


def _model(*, compiled: bool = True) -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    if compiled:
        model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    return model


def test_fit_stops_and_restores_the_best_epoch(
    tracker: TrackerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="plateau")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 4)).astype("float32")
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], dtype="float32"))[:, None]
    model = _model()
    weights_file = tmp_path / "best.weights.h5"
    callback = PlateauCallback(
        project="keras", monitor="val_loss", rules=RULES, url=tracker.url, filepath=weights_file
    )
    best_weights: list[np.ndarray] = []

    class Snapshot(keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_end(self, epoch: int, logs: object = None) -> None:
            if epoch == 0:
                best_weights.extend(w.copy() for w in self.model.get_weights())

    history = model.fit(
        x, y, validation_split=0.25, epochs=30, batch_size=16, verbose=0, callbacks=[Snapshot(), callback]
    )
    assert len(history.history["loss"]) == 3  # epochs 0, 1, 2: stopped at the third
    assert (callback.best_epoch, callback.stopped_epoch) == (0, 2)
    # The model ends with epoch 0's weights (the best), in memory and in the file.
    for restored, expected in zip(model.get_weights(), best_weights, strict=True):
        np.testing.assert_array_equal(restored, expected)
    reloaded = _model(compiled=False)  # the layers' weights; the optimizer's state is the trainer's
    reloaded.load_weights(weights_file)
    for restored, expected in zip(reloaded.get_weights(), best_weights, strict=True):
        np.testing.assert_array_equal(restored, expected)
    assert "training stops at epoch 2 (patience)" in caplog.text
    runs = httpx.get(f"{tracker.url}/api/v1/runs", params={"project": "keras"}).json()["data"]
    (run,) = runs
    assert (run["status"], run["stop_step"], run["planned_steps"]) == ("stopped", 2, 29)
    assert run["config"]["optimizer"] == "Adam"
    summary = httpx.get(f"{tracker.url}/api/v1/runs/{run['id']}/summary").json()["summary"]
    assert (summary["keras_best_epoch"], summary["stopped_epoch"], summary["stopped_by"]) == (
        0,
        2,
        "patience",
    )
    keys = httpx.get(f"{tracker.url}/api/v1/runs/{run['id']}/keys").json()["keys"]
    assert {"loss", "val_loss", "lr"} <= set(keys)


@pytest.mark.parametrize("cut_first", [True, False], ids=["cut-listed-first", "cut-listed-after"])
def test_the_rate_logged_is_the_one_the_epoch_trained_at(tracker: TrackerProcess, cut_first: bool) -> None:
    """A ``ReduceLROnPlateau`` that cuts the rate at every epoch's end from the second on (``min_delta`` so
    large that nothing improves). Listed before the callback, it has already cut the optimizer's rate when
    the callback runs; the callback logs the rate the epoch trained at either way (0.05, 0.05, 0.025), not
    the next epoch's (until 2026-11-26: 0.05, 0.025, 0.0125 when the cut came first)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    cut = keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=1, min_delta=1e6)
    callback = PlateauCallback(
        project="keras-rate",
        name="first" if cut_first else "after",
        monitor="val_loss",
        rules=RULES,
        url=tracker.url,
    )
    _model().fit(
        x,
        y,
        validation_split=0.25,
        epochs=30,
        batch_size=16,
        verbose=0,
        callbacks=[cut, callback] if cut_first else [callback, cut],
    )
    runs = httpx.get(f"{tracker.url}/api/v1/runs", params={"project": "keras-rate"}).json()["data"]
    (run,) = [r for r in runs if r["name"] == ("first" if cut_first else "after")]
    page = httpx.get(f"{tracker.url}/api/v1/runs/{run['id']}/history", params={"key": "lr"}).json()
    assert [point["value"] for point in page["points"]] == pytest.approx([0.05, 0.05, 0.025])
