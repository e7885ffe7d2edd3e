"""``plateau replay`` on a slice of the real OPDA curves, on a hand-made file, and on stored runs."""

from __future__ import annotations

import json
import math
import subprocess
import time
import uuid
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from plateau_tracker.server.policy.presets import preset
from plateau_tracker.server.replay._curves import Curve, load_jsonl
from plateau_tracker.server.replay._simulate import replay_curve, replay_sweep
from tests._cli import plateau_cli
from tests.conftest import create_run

OPDA = Path(__file__).resolve().parents[2] / "shared" / "data" / "curves" / "opda_curves.jsonl"


def plateau_replay(*args: str) -> subprocess.CompletedProcess[str]:
    return plateau_cli("replay", *args)


def brute_force_patience(values: list[float], k: int) -> int:
    best, wait = -math.inf, 0
    for i, v in enumerate(values):
        if math.isfinite(v) and v > best:
            best, wait = v, 0
        else:
            wait += 1
            if wait >= k:
                return i
    return len(values) - 1


@pytest.fixture(scope="module")
def opda_slice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not OPDA.exists():
        pytest.skip(f"OPDA curves not found at {OPDA} (../shared/data beside the checkout)")
    path = tmp_path_factory.mktemp("opda") / "slice.jsonl"
    with OPDA.open() as source:
        lines = list(source)
    by_source: dict[str, list[str]] = {}
    for line in lines:
        by_source.setdefault(json.loads(line)["source"], []).append(line)
    path.write_text("".join(line for group in by_source.values() for line in group[:60]))
    return path


def test_replay_matches_a_brute_force_patience(opda_slice: Path) -> None:
    curves = [c for c in load_jsonl(opda_slice, metric="val", score="val2") if c.complete]
    policy = preset("patience-5", monitor="val", mode="max")
    for curve in curves:
        result = replay_curve(policy, curve)
        assert result.stop_index == brute_force_patience(curve.watch, 5)
        kept = max(range(result.stop_index + 1), key=lambda i: (curve.watch[i], -i))
        assert curve.watch[result.kept_index] == curve.watch[kept]
        assert result.regret >= -1e-12 or curve.score[result.kept_index] > curve.score[result.full_best_index]


def test_replay_cli_on_opda(opda_slice: Path) -> None:
    out = plateau_replay("patience-5", "--curves", str(opda_slice), "--score", "val2", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert set(report["sources"]) == {
        "alexnet-imagenet",
        "convnext-tiny-imagenet",
        "deberta-base-mnli",
        "deberta-v3-base-mnli",
    }
    for figures in report["sources"].values():
        assert 0 < figures["compute_saved"] < 1
        assert figures["mean_regret"] >= 0
        assert 0 <= figures["share_regret_over_0.005"] <= 1
    assert all("/" in key for key in report["stop_index"])
    table = plateau_replay("default-sweep", "--sweep", "--curves", str(opda_slice), "--score", "val2")
    assert table.returncode == 0, table.stderr
    assert "sweep regret" in table.stdout
    assert "deberta-base-mnli" in table.stdout


def test_sweep_pruning_sees_only_earlier_runs(opda_slice: Path) -> None:
    curves = [
        c
        for c in load_jsonl(opda_slice, metric="val", score="val2")
        if c.complete and c.source == "deberta-base-mnli"
    ]
    results = replay_sweep(preset("median", monitor="val", mode="max"), curves)
    # Nothing is pruned before n_startup_runs=10 runs have finished.
    assert all(r.stopped_by is None for r in results[:10])
    assert any(r.stopped_by == "percentile" for r in results[10:])


def test_asha_prunes_sweeps_whose_checkpoints_miss_the_rungs(opda_slice: Path, tmp_path: Path) -> None:
    # DeBERTa checkpoints every 1,000 steps; rungs 1, 3, 9, ..., 729, 2187 are judged at the first
    # checkpoint past them (once, at exact rung steps only, this pruned none of 1,024 runs).
    policy = tmp_path / "asha.json"
    policy.write_text(json.dumps([{"rule": "asha", "min_step": 1}]))
    out = plateau_replay(str(policy), "--sweep", "--curves", str(opda_slice), "--score", "val2", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)["sources"]
    for source in ("deberta-base-mnli", "deberta-v3-base-mnli"):
        figures = report[source]
        assert figures["stopped_by"].get("asha", 0) > figures["runs"] / 2
        assert figures["compute_saved"] > 0.5
        assert 0 <= figures["sweep_best_regret"] < 0.02


def test_replay_of_a_hand_made_file_and_a_policy_file(tmp_path: Path) -> None:
    curves = tmp_path / "curves.jsonl"
    rows = [
        {
            "source": "toy",
            "run_id": 1,
            "x": [1, 2, 3, 4, 5, 6],
            "val": [0.1, 0.5, 0.6, 0.55, 0.5, 0.45],
            "budget": 6,
        },
        {
            "source": "toy",
            "run_id": 2,
            "x": [1, 2, 3, 4],
            "val": [0.2, 0.3, 0.4, 0.5],
            "time_s": [10, 20, 30, 40],
            "budget": 4,
        },
    ]
    curves.write_text("\n".join(json.dumps(r) for r in rows))
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - rule: patience\n    patience: 2\n")
    out = plateau_replay(str(policy), "--curves", str(curves), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["stop_index"] == {"toy/1": 4, "toy/2": 3}
    # Run 1 used 5 of 6 steps; run 2 ran to its end: saved 1 / (6 + 40) of the cost.
    assert report["sources"]["toy"]["compute_saved"] == pytest.approx(1 / 46)
    assert report["sources"]["toy"]["mean_regret"] == 0


def test_replay_refuses_a_bad_policy(tmp_path: Path) -> None:
    assert "unknown preset" in plateau_replay("nonsense", "--curves", "x").stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"rules": [{"rule": "patience", "patience": 0}]}')
    out = plateau_replay(str(bad), "--curves", "x")
    assert out.returncode == 1
    assert "patience" in out.stderr


def test_replay_of_stored_runs(client: httpx.Client, tracker) -> None:
    experiment = f"stored-{uuid.uuid4().hex[:6]}"
    t0 = time.time()
    for values in ([0.1, 0.5, 0.6, 0.55, 0.5, 0.45], [0.2, 0.3, 0.4, 0.5]):
        run = create_run(client, experiment=experiment)
        points = [
            {"key": "val", "step": s, "value": v, "wall_time": t0 + 10 * s} for s, v in enumerate(values)
        ]
        client.post(f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "b", "points": points})
        client.post(f"/api/v1/runs/{run['id']}/finish", json={"status": "finished"})
    waiting = create_run(client, experiment=experiment)  # live, nothing logged yet: said, not replayed
    out = plateau_replay(
        "patience-2", "--url", tracker.url, "--project", "tests", "--experiment", experiment, "--json"
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["sources"][experiment]["runs"] == 2
    assert sorted(report["stop_index"].values()) == [3, 4]
    assert "1 run(s) have no 'val' series (--metric" in out.stderr
    assert f"skipped: {experiment}/{waiting['id']}" in out.stderr
    # No points under --score: scored on the watched metric, and said (before, every score was NaN and the
    # table read a mean regret of 0, under "regret scored on test/acc").
    out = plateau_replay(
        "patience-2",
        "--url",
        tracker.url,
        "--project",
        "tests",
        "--experiment",
        experiment,
        "--score",
        "test/acc",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["sources"][experiment]["mean_regret"] == 0
    assert "2 run(s) have no 'test/acc' series (--score), scored on 'val' instead" in out.stderr
    args = ("--url", tracker.url, "--project", "tests", "--experiment", experiment, "--score", "test/acc")
    footer = plateau_replay("patience-2", *args).stdout
    assert "regret scored on test/acc (2 run(s) without it on val)" in footer


def test_the_benchmarks_patience_frontier_matches_the_engine(opda_slice: Path) -> None:
    from tests.benchmarks._frontier import patience_stops

    curves = [c for c in load_jsonl(opda_slice, metric="val", score="val2") if c.complete]
    for k in (1, 3, 7, 40):
        policy = preset(f"patience-{k}", monitor="val", mode="max")
        for curve in curves:
            assert replay_curve(policy, curve).stop_index == patience_stops(curve.watch, [k], "max")[k]


def test_the_benchmarks_ceiling_and_interval(opda_slice: Path) -> None:
    """The clairvoyant stop (each run at its watched best) costs no regret and saves what the watched
    bests leave; the bootstrap interval holds the margin of the runs as drawn, and is a single point when
    every run is the same run."""
    from tests.benchmarks._frontier import (
        clairvoyant_stops,
        margin,
        margin_interval,
        outcome,
        patience_frontier,
        patience_stops,
    )

    curves = [c for c in load_jsonl(opda_slice, metric="val", score="val2") if c.complete][:60]
    stops = clairvoyant_stops(curves, "max")
    assert outcome(curves, stops, "max").regret == 0.0
    assert all(c.watch[s] == max(c.watch) for c, s in zip(curves, stops, strict=True))
    halfway = [len(c.watch) // 2 for c in curves]  # a policy off the frontier: its margin varies by draw
    point = margin(outcome(curves, halfway, "max"), list(patience_frontier(curves, "max").values()))
    low, high = margin_interval(curves, halfway, "max", resamples=200)
    assert low <= point <= high
    assert low < high
    one = [curves[0]] * 10
    stop = patience_stops(one[0].watch, [3], "max")[3]
    low, high = margin_interval(one, [stop] * 10, "max", resamples=50)
    frontier = list(patience_frontier(one, "max").values())
    assert low == high == margin(outcome(one, [stop] * 10, "max"), frontier)


def test_the_hindsight_room_bounds_every_policy_and_is_the_clairvoyant_margin_at_no_regret(
    opda_slice: Path,
) -> None:
    """A run's stops worth making in hindsight are its new bests and its end, each with its compute saved
    and regret; the room over the frontier bounds the margin of every policy within the regret bound
    (patience-k, a stop half-way, the default, the clairvoyant), and with no regret allowed, on a score
    that is the watched metric itself, it is the clairvoyant's margin."""
    from tests.benchmarks._frontier import (
        clairvoyant_stops,
        hindsight_room,
        margin,
        outcome,
        patience_frontier,
        patience_stops,
        stop_choices,
    )

    values = [0.5, 0.7, 0.6, math.nan, 0.8, 0.8, 0.75]
    curve = Curve("s", "0", list(range(7)), values, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], list(range(1, 8)))
    # New bests at 0, 1 and 4 (0.8 again at 5 keeps 4's checkpoint), and the end, which keeps 4's too.
    choices = stop_choices(curve, "max")
    assert [saved for saved, _ in choices] == [6, 5, 2, 0]
    assert [regret for _, regret in choices] == pytest.approx([0.4, 0.3, 0.0, 0.0])

    curves = [c for c in load_jsonl(opda_slice, metric="val", score="val2") if c.complete][:60]
    frontier = list(patience_frontier(curves, "max").values())
    bound = 0.005
    room, at = hindsight_room(curves, "max", frontier, bound)
    assert 0.0 <= at <= bound
    default = [replay_curve(preset("default", monitor="val", mode="max"), c).stop_index for c in curves]
    policies = [
        clairvoyant_stops(curves, "max"),
        [len(c.watch) // 2 for c in curves],
        default,
        *([s[k] for s in (patience_stops(c.watch, [k], "max") for c in curves)] for k in (3, 10, 30)),
    ]
    within = [outcome(curves, stops, "max") for stops in policies]
    within = [p for p in within if p.regret <= bound]
    assert len(within) >= 2  # the clairvoyant and a long patience at least
    assert all(margin(p, frontier) <= room + 1e-9 for p in within)

    same = [replace(c, score=c.watch) for c in curves]
    frontier = list(patience_frontier(same, "max").values())
    clairvoyant = margin(outcome(same, clairvoyant_stops(same, "max"), "max"), frontier)
    assert hindsight_room(same, "max", frontier, 0.0) == pytest.approx((clairvoyant, 0.0), abs=1e-6)


def test_a_negative_regret_is_no_saving_over_the_frontier() -> None:
    """A policy whose kept checkpoints scored better on the held-out split than the full runs' bests (mean
    regret below 0) is compared with the frontier at regret 0, not credited its whole saving because no
    patience-k point reached its regret; the frontier's own lucky points count at 0 too."""
    from tests.benchmarks._frontier import Point, margin, saved_at

    frontier = [Point(0.6, 0.002), Point(0.3, 0.0), Point(0.2, -0.001)]
    assert saved_at(frontier, -0.002) == saved_at(frontier, 0.0) == 0.3
    assert margin(Point(0.4, -0.002), frontier) == pytest.approx(0.1)  # was 0.4
    assert margin(Point(0.4, 0.001), frontier) == pytest.approx(0.4 - 0.45)  # halfway to (0.6, 0.002)
    assert saved_at([Point(0.5, -0.001)], 0.0) == 0.5  # a lucky point alone is the frontier at 0


def test_one_lucky_run_does_not_offset_another_runs_loss() -> None:
    """Each run's regret counts at 0 or more before the mean: a run whose kept checkpoint scores better on
    the held-out split than its watched best does not cancel what another run lost, for a policy and for
    the patience-k frontier alike."""
    from tests.benchmarks._frontier import outcome, patience_frontier

    # Run a: its watched best (index 3) scores 0.5 below its first checkpoint on the held-out split.
    lucky = Curve("s", "a", [1, 2, 3, 4], [0.4, 0.3, 0.35, 0.5], [0.9, 0.5, 0.5, 0.4], [1, 2, 3, 4])
    # Run b: stopping before its late best (index 3) loses 0.3.
    late = Curve("s", "b", [1, 2, 3, 4], [0.5, 0.4, 0.4, 0.9], [0.5, 0.5, 0.5, 0.8], [1, 2, 3, 4])
    point = outcome([lucky, late], [0, 2], "max")
    assert point.regret == pytest.approx(0.3 / 2)  # not (-0.5 + 0.3) / 2
    assert patience_frontier([lucky, late], "max", ks=[1])[1].regret == pytest.approx(0.3 / 2)


def test_the_sweep_benchmarks_optuna_side_is_the_same_from_run_to_run(opda_slice: Path) -> None:
    """Optuna's HyperbandPruner brackets trials by a hash of the study's name, drawn at random unless
    given: the benchmark names its studies, so each pruner stops the same runs at the same checkpoints on
    every run of it (a seed-1 corpus sweep's best configuration at no larger regret read Hyperband 0.808 in
    one run and Percentile(25, 5, warm-up 7) 0.714 in the next)."""
    pytest.importorskip("optuna")
    import optuna.pruners as op

    from tests.benchmarks._sources import load_sources
    from tests.benchmarks.bench_sweep import optuna_stops

    for source in load_sources(opda_slice, []).values():
        first = optuna_stops(source, lambda: op.HyperbandPruner(min_resource=1, max_resource=8))
        assert optuna_stops(source, lambda: op.HyperbandPruner(min_resource=1, max_resource=8)) == first
        assert any(stop < len(c.steps) - 1 for stop, c in zip(first, source.curves, strict=True))


def test_a_negative_sweep_regret_is_compared_at_zero() -> None:
    """The sweep benchmark reads a negative sweep regret as 0, its own and the others' alike: a policy at
    -0.0033 is compared with what saves most at regret 0 or below, not found ahead of an empty set."""
    from tests.benchmarks.bench_sweep import front_saved_at, no_larger_regret

    assert no_larger_regret(0.0, -0.0033)
    assert no_larger_regret(-0.01, -0.0033)
    assert not no_larger_regret(0.001, -0.0033)
    assert no_larger_regret(0.001, 0.002)
    assert front_saved_at([(0.5, 0.0), (0.2, -0.01), (0.9, 0.02)], -0.02) == 0.5  # was 0.0
    assert front_saved_at([(0.9, 0.02)], 0.0) == 0.0


def test_the_sweep_benchmarks_ceiling_finds_the_best_run_and_bounds_every_sweep(opda_slice: Path) -> None:
    """The clairvoyant sweep (every run at its first checkpoint but the best-scoring one, at its watched
    best) has no sweep regret, and no stopping at checkpoints that finds the best run saves more: neither
    the i-Epoch front at no regret nor default-sweep."""
    from tests.benchmarks._sources import load_sources
    from tests.benchmarks.bench_sweep import clairvoyant_sweep_stops, i_epoch_front, score

    for source in load_sources(opda_slice, []).values():
        stops = clairvoyant_sweep_stops(source)
        ceiling, regret = score(source, stops)
        assert regret == 0.0
        assert sum(s > 0 for s in stops) <= 1
        assert all(saved <= ceiling + 1e-12 for saved, r in i_epoch_front(source) if r <= 0.0)
        results = replay_sweep(preset("default-sweep", monitor="val", mode="max"), source.curves)
        ours, ours_regret = score(source, [r.stop_index for r in results])
        assert ours <= ceiling + 1e-12 or ours_regret > 0.0


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        (
            [("a", 0.05, 0.01), ("b", 0.03, 0.0), ("c", None, 0.2)],
            ["met on 2 of 2", "above the i-Epoch front at no larger regret: met"],
        ),
        (
            [("a", 0.029, 0.01), ("b", -0.01, -0.002), ("c", 0.1, 0.0)],
            ["met on 1 of 3; short on a, b", "met on 2 of 3; behind on b"],
        ),
    ],
)
def test_the_sweep_benchmark_says_its_targets(rows, said) -> None:
    """bench_sweep's target lines: +3 pp over the best Optuna configuration at no larger regret on every
    source that some configuration reaches (exactly +3 meets it), and no source where the i-Epoch front
    saves more at no larger regret; each line names the sources that miss."""
    from tests.benchmarks.bench_sweep import targets_said

    optuna, front = targets_said(rows)
    assert optuna.startswith("+3 pp over the best Optuna configuration")
    assert optuna.endswith(said[0])
    assert front.endswith(said[1])


def test_replay_hands_the_files_series_to_the_rules(tmp_path: Path) -> None:
    """A curve file's per-checkpoint series (here ``lr``) reach the rules under their own names; the
    file's ``mode`` orients the watched loss and ``score_mode`` the accuracy its regret is scored on. The
    loss settles on its floor by step 20: under a constant rate the default stops it once the floor of
    the plan is passed and nothing was gained over the last doubling; a rate still decaying from its peak
    holds it while the run shows evidence of learning, so it is stopped later."""
    n = 60
    loss = [0.2 + 2.0 * math.exp(-0.3 * min(i, 20)) for i in range(n)]
    accuracy = [0.9 - 0.8 * math.exp(-0.3 * min(i, 20)) for i in range(n)]
    base = {"x": list(range(1, n + 1)), "budget": 100, "val": loss, "val2": accuracy, "mode": "min"}
    records = [
        {**base, "source": "flat-rate", "run_id": "a", "score_mode": "max", "lr": [0.5] * n},
        {
            **base,
            "source": "high-rate",
            "run_id": "b",
            "score_mode": "max",
            "lr": [1.0 - i / 100 for i in range(n)],
        },
    ]
    path = tmp_path / "curves.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = plateau_replay("default", "--curves", str(path), "--score", "val2", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    stops = report["stop_index"]
    assert stops["flat-rate/a"] < n - 1
    assert stops["flat-rate/a"] < stops["high-rate/b"]
    assert report["sources"]["flat-rate"]["stopped_by"] == {"outlook": 1}
    assert report["sources"]["flat-rate"]["mean_regret"] == 0.0


def test_replay_reads_a_curve_file_written_as_the_api_writes_numbers(tmp_path: Path) -> None:
    """A curve file may spell NaN as the API does (the string "NaN": strict JSON has no literal for it), and
    leave the watched metric null where a run did not evaluate (validation every other epoch, its rate at
    every one). Until 2026-11-27 one "NaN" string dropped the whole series, so the run was replayed as NaN at
    every checkpoint (stopped at once: "saved 1.000, regret 0"), a null was read as NaN (stopped there), a
    --metric the file lacks replayed every run as NaN without a word, and x = 0.5, 1.0, 1.5 was truncated to
    steps 0, 1, 1."""
    n = 30
    climb = [0.9 - 0.8 * math.exp(-0.4 * i) for i in range(n)]
    peaked = [0.5 + 0.02 * i if i <= 10 else 0.7 - 0.01 * (i - 10) for i in range(n)]
    diverged: list[float | str] = [*climb[:12], "NaN", *climb[13:]]
    every_other: list[float | None] = [v if i % 2 == 0 else None for i, v in enumerate(peaked)]
    records = [
        {"source": "api", "run_id": "nan", "x": list(range(n)), "val": diverged, "budget": n},
        {
            "source": "api",
            "run_id": "sparse",
            "x": list(range(n)),
            "val": every_other,
            "budget": n,
            "lr": [0.1] * n,
        },
        {
            "source": "api",
            "run_id": "dense",
            "x": list(range(0, n, 2)),
            "val": peaked[::2],
            "budget": n,
            "lr": [0.1] * len(peaked[::2]),
        },
        {"source": "api", "run_id": "unwatched", "x": list(range(n)), "val_acc": climb, "budget": n},
    ]
    path = tmp_path / "curves.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = plateau_replay("patience-3", "--curves", str(path), "--json", "--score", "val2")
    assert out.returncode == 0, out.stderr
    stops = json.loads(out.stdout)["stop_index"]
    assert "3 run(s) have no 'val2' series (--score), scored on 'val' instead" in out.stderr
    assert stops["api/nan"] == 12  # non_finite at the NaN itself, not at the first checkpoint
    # The run evaluated at even checkpoints is replayed as the same run written without the others: judged
    # at the same steps (10 is its best, so patience 3 stops at step 16, its 8th evaluation).
    assert stops["api/sparse"] == stops["api/dense"] == 8
    assert "api/unwatched" not in stops
    assert "1 run(s) have no 'val' series (--metric" in out.stderr
    assert "skipped: api/unwatched" in out.stderr
    loaded = {c.run_id: c for c in load_jsonl(path, metric="val", score="val")}
    assert loaded["sparse"].steps == loaded["dense"].steps == list(range(0, n, 2))
    assert loaded["sparse"].extras["lr"] == [0.1] * (n // 2)
    assert math.isnan(loaded["nan"].watch[12])
    assert loaded["nan"].watch[13] == climb[13]

    fractional = tmp_path / "fractional.jsonl"
    fractional.write_text(json.dumps({"source": "f", "run_id": 1, "x": [0.5, 1.0, 1.5], "val": [1, 2, 3]}))
    out = plateau_replay("patience-3", "--curves", str(fractional))
    assert out.returncode == 1
    assert f"{fractional}:1: x must hold whole steps" in out.stderr


def test_replay_keeps_every_runs_stop_when_run_ids_repeat_or_are_missing(tmp_path: Path) -> None:
    """Two sweeps' files pooled repeat their run_ids within a source, and a hand-written file may give
    none: until 2026-11-27 ``--json`` keyed each stop by ``source/run_id``, so a repeated id kept only the
    last run's stop and every run without one was "source/None", one key for all. And the table's footer
    said "regret scored on val2" when some runs, lacking it, were scored on the watched metric."""
    n = 20
    early = [0.5 + 0.05 * i if i <= 4 else 0.7 for i in range(n)]  # best at 4: patience 3 stops at 7
    late = [0.5 + 0.02 * i for i in range(n)]  # rises to the end
    records = [
        {"source": "pool", "run_id": "0", "x": list(range(n)), "val": early, "val2": early},
        {"source": "pool", "run_id": "0", "x": list(range(n)), "val": late, "val2": late},
        {"source": "pool", "x": list(range(n)), "val": late, "val2": late},
        {"source": "pool", "x": list(range(n)), "val": early},
    ]
    path = tmp_path / "pooled.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = plateau_replay("patience-3", "--curves", str(path), "--score", "val2", "--json")
    assert out.returncode == 0, out.stderr
    stops = json.loads(out.stdout)["stop_index"]
    assert stops == {"pool/0": 7, "pool/0#2": n - 1, "pool/line 3": n - 1, "pool/line 4": 7}
    assert "scored on 'val' instead: pool/line 4" in out.stderr
    table = plateau_replay("patience-3", "--curves", str(path), "--score", "val2")
    assert "regret scored on val2 (1 run(s) without it on val)" in table.stdout


def _sweep_curve(run_id: str, values: list[float]) -> Curve:
    steps = list(range(1, len(values) + 1))
    return Curve("sweep", run_id, steps, values, values, [float(s) for s in steps], planned_steps=len(values))


def test_default_sweep_halves_from_the_first_evaluation_before_the_median_has_its_startup_runs() -> None:
    """``default-sweep`` prunes by successive halving (reduction factor 4: rungs at steps 1, 4, 16, ...)
    as soon as another run has reached the rung, while the median waits for 5 finished runs: with 3 good
    runs done, a run far behind them at step 1 is stopped there, by asha."""
    good = [0.5 + 0.4 * (1 - math.exp(-i / 8)) + 0.001 * (i % 3) for i in range(40)]
    poor = [0.1 + 0.001 * i for i in range(40)]
    curves = [_sweep_curve(f"good-{i}", [v + 0.01 * i for v in good]) for i in range(3)]
    curves.append(_sweep_curve("poor", poor))
    results = replay_sweep(preset("default-sweep", monitor="acc", mode="max"), curves)
    by_run = {r.curve.run_id: r for r in results}
    assert by_run["poor"].stopped_by == "asha"
    assert by_run["poor"].stop_index == 0  # step 1, rung 1
    # A rung no other run has reached passes; the first run is compared with nobody.
    assert by_run["good-0"].stopped_by != "asha"
    # Within the top quarter at step 1 (best of 4 there): not pruned at rung 1.
    assert by_run["good-2"].stopped_by != "asha" or by_run["good-2"].stop_index > 0


def test_replay_reads_the_direction_from_the_metrics_name_when_nothing_else_gives_it(tmp_path: Path) -> None:
    """A curve file without ``mode`` and no ``--mode``: ``--metric val_loss`` is minimised (patience-2 keeps
    the lowest loss), ``--metric val`` says nothing and is maximised as before."""
    loss = [1.0, 0.5, 0.4, 0.45, 0.5, 0.6, 0.7]
    record = {"source": "s", "run_id": "0", "x": list(range(1, 8)), "val_loss": loss, "val": loss}
    path = tmp_path / "curves.jsonl"
    path.write_text(json.dumps(record))
    by_name = {}
    for metric in ("val_loss", "val"):
        out = plateau_replay("patience-2", "--curves", str(path), "--metric", metric, "--json")
        assert out.returncode == 0, out.stderr
        by_name[metric] = json.loads(out.stdout)
    assert by_name["val_loss"]["policy"]["mode"] == "min"
    assert by_name["val_loss"]["stop_index"] == {"s/0": 4}  # two evaluations after the lowest, 0.4
    assert by_name["val"]["policy"]["mode"] == "max"
    assert by_name["val"]["stop_index"] == {"s/0": 2}  # read as an accuracy: best at the first value


def test_bench_default_pools_a_sources_runs_across_draws_and_reads_no_opda_when_told(
    opda_slice: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--pooled`` judges each source over every draw given, as one source of all their runs; ``--curves
    ''`` leaves OPDA out instead of reading the working directory as a curve file."""
    import sys

    from tests.benchmarks import bench_default

    monkeypatch.setattr(
        sys,
        "argv",
        ["bench_default", "--curves", "", "--corpus", str(opda_slice), str(opda_slice), "--pooled", "--json"],
    )
    bench_default.main()
    draws = json.loads(capsys.readouterr().out)["draws"]
    # One key for the file given twice, and one for the pooled table.
    assert list(draws) == ["slice.jsonl", "corpus draws pooled per source"]
    pooled = draws["corpus draws pooled per source"]["sources"]
    single = draws["slice.jsonl"]["sources"]
    assert set(pooled) == set(single)
    for name, judged in pooled.items():
        # Twice the same runs: the same saving and regret, with every stop counted twice.
        assert judged["saved"] == pytest.approx(single[name]["saved"])
        assert judged["regret"] == pytest.approx(single[name]["regret"])
        assert sum(judged["stops"].values()) == 2 * sum(single[name]["stops"].values())
