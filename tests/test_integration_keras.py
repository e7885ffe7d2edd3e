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

from sdk.integrations.keras import PlateauCallback  # noqa: E402
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
