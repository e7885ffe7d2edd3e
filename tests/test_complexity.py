"""Model complexity: profile_model on known models, the step timer, and the summary's way to the tracker
(also when the tracker is away: spooled, then sent by `plateau sync`)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

import plateau_tracker as plateau
from plateau_tracker.complexity import StepTimes, profile_model
from tests._server import TrackerProcess, free_port

torch = pytest.importorskip("torch")


def two_layers() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    model[2].weight.requires_grad_(False)  # frozen: counted in params, not in trainable_params
    return model


def test_profile_counts_parameters_exactly_and_flops_by_hand() -> None:
    model = two_layers()
    model.train()
    figures = profile_model(model, torch.randn(8, 64), batch_size=16, warmup=1, repeats=5)
    assert figures["params"] == 64 * 32 + 32 + 32 * 10 + 10
    assert figures["trainable_params"] == 64 * 32 + 32 + 10
    assert figures["param_bytes"] == 4 * figures["params"]  # float32
    # A matmul of (1 x i) by (i x o) is i*o multiply-adds, 2 FLOPs each; biases and ReLU are not counted.
    assert figures["flops_per_sample"] == 2 * 64 * 32 + 2 * 32 * 10
    assert figures["latency_ms_batch1"] > 0
    assert figures["latency_ms_per_sample"] > 0
    assert figures["latency_batch_size"] == 16
    assert figures["throughput_samples_per_s"] == pytest.approx(1e3 / figures["latency_ms_per_sample"])
    assert figures["peak_rss_bytes"] > 10 * 2**20
    assert model.training  # left in the mode it was in


def test_profile_takes_tuples_and_dicts_of_tensors() -> None:
    class Pair(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(5, 3, bias=False)
            self.b = torch.nn.Linear(7, 3, bias=False)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return self.a(x) + self.b(y)

    model = Pair()
    by_position = profile_model(model, (torch.randn(4, 5), torch.randn(4, 7)), batch_size=2, repeats=2)
    by_name = profile_model(model, {"x": torch.randn(4, 5), "y": torch.randn(4, 7)}, batch_size=2, repeats=2)
    assert by_position["flops_per_sample"] == by_name["flops_per_sample"] == 2 * 5 * 3 + 2 * 7 * 3


def test_step_times_leave_out_the_first_step() -> None:
    times = StepTimes(skip_first=1)
    for seconds in [5.0, 0.1, 0.3, 0.2]:
        times.add(seconds)
    # p90 by the one quantile Plateau reports (linear between ranks): 0.2 + 0.8 x (0.3 - 0.2)
    assert times.figures() == {"step_time_s": 0.2, "step_time_p90_s": pytest.approx(0.28), "steps_timed": 4}


def test_profile_and_step_timer_reach_the_run_summary(tracker: TrackerProcess) -> None:
    run = plateau.init(project="complexity", url=tracker.url)
    figures = run.profile_model(two_layers(), torch.randn(4, 64), batch_size=8, repeats=3)
    for _ in range(6):
        with run.step_timer():
            time.sleep(0.02)
    assert run.finish() == 0
    stored = httpx.get(f"{tracker.url}/api/v1/runs/{run.id}/summary").json()
    summary = stored["summary"]
    assert summary["params"] == figures["params"]
    assert summary["flops_per_sample"] == figures["flops_per_sample"]
    assert summary["steps_timed"] == 6
    assert 0.02 <= summary["step_time_s"] < 0.2
    assert stored["convergence"]["time_per_step_source"] == "step_timer"
    steps = httpx.get(f"{tracker.url}/api/v1/runs/{run.id}/history", params={"key": "time/step_ms"}).json()
    assert [p["step"] for p in steps["points"]] == list(range(6))
    assert all(p["value"] >= 20 for p in steps["points"])


def test_a_summary_made_while_the_tracker_is_away_is_spooled_and_synced(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    run = plateau.init(
        project="complexity", experiment="offline", url=url, wait=0.2, run_key="offline-summary"
    )
    run.log({"loss": 1.0}, step=0)
    run.update_summary({"params": 42, "note": "made offline"})
    run.finish(timeout=0.5)
    server = TrackerProcess(tmp_path, port=port)
    try:
        report = plateau.sync()
        assert report.left == 0
        runs = httpx.get(f"{url}/api/v1/runs", params={"experiment": "offline"}).json()["data"]
        assert len(runs) == 1
        summary = runs[0]["summary"]
        assert (summary["params"], summary["note"]) == (42, "made offline")
        assert summary["peak_rss_bytes"] > 0  # the run's peak memory, added at finish
        loss = httpx.get(f"{url}/api/v1/runs/{runs[0]['id']}/history", params={"key": "loss"}).json()
        assert [p["value"] for p in loss["points"]] == [1.0]
    finally:
        server.stop()
