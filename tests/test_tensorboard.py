"""TensorBoard export and import, checked by independent readers: TensorBoard's EventAccumulator, a real
`tensorboard --logdir` process over its HTTP data API, and an export -> import round trip."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from plateau_tracker.server.cli import main
from plateau_tracker.server.tb import import_logdir
from tests._server import TrackerProcess, free_port
from tests.conftest import create_run

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing import event_accumulator

LONG = 25_000  # more than EventAccumulator's default of 10,000 kept scalars per tag
POLICY = {
    "monitor": "val/loss",
    "mode": "min",
    "rules": [{"rule": "patience", "patience": 3}, {"rule": "checkpoint"}],
}
VAL = [1.0, 0.7, 0.123456789, math.nan, 0.2, 0.3, math.inf, -math.inf, 0.25]  # best at step 2, stop at 5


def _post(client: httpx.Client, run_id: int, batch_id: str, points: list[dict[str, Any]]) -> dict[str, Any]:
    response = client.post(
        f"/api/v1/runs/{run_id}/metrics",
        content=json.dumps({"batch_id": batch_id, "points": points}),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def stored(client: httpx.Client, run_id: int) -> dict[tuple[str, int], list[tuple[int, float, float]]]:
    """Every stored point, by (key, rank): (step, value, wall_time) in step order."""
    ranks = client.get(f"/api/v1/runs/{run_id}/keys").json()["ranks"]
    series = {}
    for key, key_ranks in ranks.items():
        for rank in key_ranks:
            points: list[tuple[int, float, float]] = []
            start: int | None = 0
            while start is not None:
                page = client.get(
                    f"/api/v1/runs/{run_id}/history",
                    params={"key": key, "rank": rank, "start_step": start, "limit": 100_000},
                ).json()
                for p in page["points"]:
                    value = p["value"]
                    number = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(value, value)
                    points.append((p["step"], float(number), p["wall_time"]))
                start = page["next_step"]
            series[(key, rank)] = points
    return series


def plateau(*args: str) -> None:
    """Run a ``plateau`` command in this process; it must succeed."""
    assert main(list(args)) == 0


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def float32(value: float) -> float:
    result: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return result


@pytest.fixture(scope="module")
def exported(tracker: TrackerProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A run with NaN and +-inf, a 25,000-point key, a key on two ranks, decisions and a summary; exported."""
    with httpx.Client(base_url=tracker.url, timeout=60) as client:
        run = create_run(client, POLICY, experiment="tb-export", name="resnet/lr=0.1", config={"lr": 0.1})
        t0 = 1_700_000_000.0
        val = [
            {"key": "val/loss", "step": s, "value": v, "wall_time": t0 + 60 * s} for s, v in enumerate(VAL)
        ]
        decision = _post(client, run["id"], "val", val)["decision"]
        assert decision["action"] == "stop"
        loss = [
            {"key": "train/loss", "step": s, "value": 1.0 / (s + 1), "wall_time": t0 + 0.02 * s}
            for s in range(LONG)
        ]
        for part, start in enumerate(range(0, LONG, 10_000)):  # the points form's bound on a batch
            _post(client, run["id"], f"loss-{part}", loss[start : start + 10_000])
        grads = [
            {"key": "dist/sync_wait_ms", "step": s, "rank": r, "value": 0.1 * s + r, "wall_time": t0 + s}
            for s in range(50)
            for r in (0, 1)
        ]
        _post(client, run["id"], "grads", grads)
        client.patch(
            f"/api/v1/runs/{run['id']}/summary", json={"summary": {"params": 11_689_512, "device": "cpu"}}
        )
        client.post(f"/api/v1/runs/{run['id']}/finish", json={"status": "stopped"})
        logdir = tmp_path_factory.mktemp("tb") / "logs"
        plateau(
            "export", "tensorboard", "--run", str(run["id"]), "--logdir", str(logdir), "--url", tracker.url
        )
        (directory,) = logdir.iterdir()
        assert directory.name == f"resnet_lr=0.1-{run['id']}"
        return {"run": run, "logdir": logdir, "dir": directory, "stored": stored(client, run["id"])}


def accumulator(directory: Path) -> event_accumulator.EventAccumulator:
    acc = event_accumulator.EventAccumulator(
        str(directory), size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0}
    )
    acc.Reload()
    return acc


def test_event_accumulator_reads_back_every_point_step_value_and_wall_time(exported: dict[str, Any]) -> None:
    acc = accumulator(exported["dir"])
    expected_tags = {"val/loss": ("val/loss", 0), "train/loss": ("train/loss", 0)}
    expected_tags |= {f"dist/sync_wait_ms/rank{r}": ("dist/sync_wait_ms", r) for r in (0, 1)}
    assert set(expected_tags) <= set(acc.Tags()["scalars"])
    total_read = total_stored = 0
    for tag, series in expected_tags.items():
        events = acc.Scalars(tag)
        points = exported["stored"][series]
        assert len(events) == len(points), tag
        for event, (step, value, wall_time) in zip(events, points, strict=True):
            assert event.step == step
            assert event.wall_time == wall_time
            assert same(event.value, float32(value)), (tag, step, event.value, value)
        total_read += len(events)
        total_stored += len(points)
    assert total_read == total_stored == len(VAL) + LONG + 100
    print(f"\nEventAccumulator read {total_read} scalar points of {total_stored} stored")
    # The decisions, as text at their steps; the best value at the best step.
    texts = {e.step: e.tensor_proto.string_val[0].decode() for e in acc.Tensors("plateau/decisions")}
    assert "**stop** by `patience` (best step 2)" in texts[5]
    assert "**checkpoint**" in texts[2]
    best = acc.Scalars("~plateau/best_value")
    assert [(e.step, e.value) for e in best] == [(2, float32(0.123456789))]
    assert acc.Scalars("~plateau/summary/params")[0].value == 11_689_512
    # Every one-point run-level chart sorts after the curves (TensorBoard compares ASCII; '~' is last):
    # the Scalars page opens on the run's own curves, not on 18 one-point charts.
    one_point = {tag for tag in acc.Tags()["scalars"] if len(acc.Scalars(tag)) == 1}
    assert one_point
    assert all(tag.startswith("~plateau/") for tag in one_point), one_point
    assert all(tag < "~" for tag in acc.Tags()["scalars"] if tag not in one_point)


def test_reexport_replaces_the_file_and_duplicates_nothing(
    exported: dict[str, Any], tracker: TrackerProcess
) -> None:
    run_id = str(exported["run"]["id"])
    plateau(
        "export", "tensorboard", "--run", run_id, "--logdir", str(exported["logdir"]), "--url", tracker.url
    )
    assert len(list(exported["dir"].glob("*tfevents*"))) == 1
    acc = accumulator(exported["dir"])
    assert len(acc.Scalars("train/loss")) == LONG
    assert len(acc.Scalars("val/loss")) == len(VAL)


def test_export_import_round_trips_the_run_exactly(exported: dict[str, Any], tracker: TrackerProcess) -> None:
    plateau("import", "tensorboard", str(exported["logdir"]), "--experiment", "tb-back", "--url", tracker.url)
    again_report = import_logdir(exported["logdir"], tracker.url, experiment="tb-back", project="default")
    assert [run.accepted for run in again_report.runs] == [0]  # importing again adds nothing
    with httpx.Client(base_url=tracker.url, timeout=60) as client:
        runs = client.get("/api/v1/runs", params={"experiment": "tb-back"}).json()["data"]
        assert len(runs) == 1
        back = runs[0]
        assert back["name"] == "resnet/lr=0.1"
        assert back["config"]["lr"] == 0.1
        assert back["world_size"] == 2
        assert back["summary"]["params"] == 11_689_512
        again = stored(client, back["id"])
    original = exported["stored"]
    assert set(again) == set(original)
    for series, points in original.items():
        assert len(again[series]) == len(points), series
        for (step, value, wall), (step2, value2, wall2) in zip(points, again[series], strict=True):
            assert (step, wall) == (step2, wall2)
            assert same(value, value2), (series, step, value, value2)  # float64, not float32


def test_import_reads_legacy_simple_values_and_tensor_summaries(
    tmp_path: Path, tracker: TrackerProcess
) -> None:
    import numpy as np
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.scalar import metadata as scalar_metadata
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    logdir = tmp_path / "logs"
    legacy = EventFileWriter(str(logdir / "legacy"))
    modern = EventFileWriter(str(logdir / "tf2" / "train"))
    for step in range(30):
        value = 1.0 / (step + 1)
        legacy.add_event(
            event_pb2.Event(
                step=step,
                wall_time=1_700_000_000.0 + step,
                summary=summary_pb2.Summary(
                    value=[summary_pb2.Summary.Value(tag="loss", simple_value=value)]
                ),
            )
        )
        # TF2's tf.summary.scalar: a tensor, with the scalars plugin named on the tag's first value only.
        tensor_value = summary_pb2.Summary.Value(
            tag="epoch_loss", tensor=tensor_util.make_tensor_proto(np.float64(value))
        )
        if step == 0:
            tensor_value.metadata.CopyFrom(
                scalar_metadata.create_summary_metadata(display_name="", description="")
            )
        modern.add_event(
            event_pb2.Event(
                step=step, wall_time=1_700_001_000.0 + step, summary=summary_pb2.Summary(value=[tensor_value])
            )
        )
    legacy.close()
    modern.close()
    plateau("import", "tensorboard", str(logdir), "--experiment", "tb-foreign", "--url", tracker.url)
    with httpx.Client(base_url=tracker.url, timeout=60) as client:
        runs = {
            r["name"]: r
            for r in client.get("/api/v1/runs", params={"experiment": "tb-foreign"}).json()["data"]
        }
        assert set(runs) == {"legacy", "tf2/train"}
        old = stored(client, runs["legacy"]["id"])[("loss", 0)]
        new = stored(client, runs["tf2/train"]["id"])[("epoch_loss", 0)]
    assert [(s, v, w) for s, v, w in old] == [
        (s, float32(1.0 / (s + 1)), 1_700_000_000.0 + s) for s in range(30)
    ]
    assert [(s, v, w) for s, v, w in new] == [(s, 1.0 / (s + 1), 1_700_001_000.0 + s) for s in range(30)]


def test_a_real_tensorboard_serves_the_exported_scalars_and_hparams(exported: dict[str, Any]) -> None:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        str(exported["logdir"]),
        "--host",
        "127.0.0.1",
    ]
    command += ["--port", str(port), "--samples_per_plugin", "scalars=1000000"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    run = exported["dir"].name
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            deadline = time.monotonic() + 60
            served: list[Any] = []
            while time.monotonic() < deadline and len(served) < LONG:
                try:
                    response = client.get(
                        "/data/plugin/scalars/scalars", params={"run": run, "tag": "train/loss"}
                    )
                    served = response.json() if response.status_code == 200 else []
                except httpx.TransportError:
                    pass
                time.sleep(0.5)
            assert len(served) == LONG
            points = exported["stored"][("train/loss", 0)]
            assert [(wall, step) for wall, step, _ in served] == [(w, s) for s, _, w in points]
            assert all(value == float32(v) for (_, _, value), (_, v, _) in zip(served, points, strict=True))
            val = client.get("/data/plugin/scalars/scalars", params={"run": run, "tag": "val/loss"}).json()
            assert [value for _, _, value in val][3] == "NaN"
            experiment = client.post("/data/plugin/hparams/experiment", json={"experimentName": ""}).json()
            hparams = {info["name"] for info in experiment["hparamInfos"]}
            metrics = {info["name"]["tag"] for info in experiment["metricInfos"]}
            assert {"lr", "plateau/status", "plateau/stop_rule"} <= hparams
            assert {"~plateau/best_value", "~plateau/summary/params", "val/loss"} <= metrics
    finally:
        process.terminate()
        process.wait(timeout=30)
