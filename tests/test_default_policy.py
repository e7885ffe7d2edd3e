"""The default policy's ``outlook``: each verdict (pace, retreat, chance, the patience fallback) and each hold
(the plan's floor, the blind hold, the learning rate, a falling validation loss, a rise), pinned on curves
built to show one of them, and the promise that every hold expires when the run stops showing evidence of
learning."""

from __future__ import annotations

import json
import math
import random

import pytest

from plateau_tracker.server.policy import Context, Observation, PolicySpec, evaluate, initial_states
from plateau_tracker.server.policy.presets import DEFAULT_RULES, preset
from tests._reasons import detail
from tests.test_rule_library import judge, stop_of

OUTLOOK = next(r for r in DEFAULT_RULES if r["rule"] == "outlook")


def plan(steps: int) -> Context:
    return Context(planned_steps=steps)


def noisy(values: list[float], sigma: float, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [v + rng.gauss(0.0, sigma) for v in values]


def saturating(n: int, *, top: float = 0.9, start: float = 0.1, rate: float = 0.3) -> list[float]:
    return [top - (top - start) * math.exp(-rate * i) for i in range(n)]


def test_the_default_is_the_safety_rules_the_checkpoint_and_one_outlook() -> None:
    assert [r["rule"] for r in DEFAULT_RULES] == [
        "non_finite",
        "divergence",
        "checkpoint",
        "perfect",
        "outlook",
    ]
    sweep = preset("default-sweep", monitor="m", mode="max")
    assert [r.rule for r in sweep.rules] == [*(r["rule"] for r in DEFAULT_RULES), "percentile", "asha"]


def test_pace_stops_a_run_that_has_converged_and_says_why() -> None:
    """Saturated and jittering about its top under a constant rate: once nothing was gained over the last
    doubling, what is left to the planned end is within 3% of the run's progress."""
    values = noisy(saturating(100), 0.003)
    stop = stop_of(judge(DEFAULT_RULES, values, extras={"lr": [0.1] * 100}, ctx=plan(100)))
    assert stop is not None
    assert stop.rule == "outlook"
    assert stop.evidence["verdict"] == "pace"
    assert 25 <= stop.step < 90  # past the plan's floor, before its last tenth
    e = stop.evidence
    assert e["gain"] * e["doublings_left"] <= e["bar"] == pytest.approx(0.03 * e["progress"])
    assert stop.reason.startswith("m has converged")
    assert "over the last doubling of the run" in detail(stop)
    assert stop.best_value == max(values[: stop.step + 1])


def test_pace_counts_progress_past_the_first_evaluations_drop() -> None:
    """A boosted model's first evaluation is the constant predictor's: its drop says nothing of the run, so
    the progress the pace is held against starts at the better of the first two values."""
    values = [1.0986, 0.70] + [round(0.55 + 0.15 * math.exp(-0.2 * i), 3) for i in range(1, 59)]
    stop = stop_of(judge(DEFAULT_RULES, values, mode="min", monitor="val/logloss", ctx=plan(60)))
    assert stop is not None
    best = min(values[: stop.step + 1])
    assert stop.evidence["progress"] == pytest.approx(0.70 - best)


def test_no_pace_stop_in_the_last_tenth_of_the_plan() -> None:
    """A run that settles only at 92% of its plan is left to finish: little is left to save there, and a
    stop there has stopped runs one or two evaluations before a last gain."""
    climb = [0.1 + 0.8 * i / 92 for i in range(92)]
    values = climb + [climb[-1]] * 8
    assert stop_of(judge(DEFAULT_RULES, values, extras={"lr": [0.1] * 100}, ctx=plan(100))) is None


def test_a_pace_stop_waits_for_evaluations_without_a_new_best() -> None:
    """However small the gains, a run that still sets a new best at each of its last evaluations is not
    stopped by the pace."""
    values = [0.9 - 0.8 * math.exp(-0.5 * i) for i in range(60)]  # a new best at every evaluation
    assert stop_of(judge(DEFAULT_RULES, values, extras={"lr": [0.1] * 60}, ctx=plan(60))) is None


def test_retreat_stops_a_run_that_has_left_its_best_behind() -> None:
    values = noisy(saturating(20, rate=0.25) + [0.8 - 0.01 * i for i in range(60)], 0.002)
    stop = stop_of(judge(DEFAULT_RULES, values, extras={"lr": [0.1] * 80}, ctx=plan(80)))
    assert stop is not None
    assert stop.evidence["verdict"] == "retreat"
    assert stop.best_step <= 22
    assert stop.step < 40
    assert stop.reason.startswith("m has left its best behind")


def test_a_retreat_within_the_metrics_noise_is_no_retreat() -> None:
    """A plateau jittering by its noise about a level a little below a lucky best is not a retreat."""
    values = saturating(30) + noisy([0.9] * 50, 0.01, seed=3)
    stop = stop_of(judge(DEFAULT_RULES, values, extras={"lr": [0.1] * 80}, ctx=plan(80)))
    assert stop is None or stop.evidence["verdict"] == "pace"


def test_a_run_that_collapses_to_chance_is_stopped_whatever_its_schedule() -> None:
    """Learned to 0.6 by epoch 5, at chance from epoch 9 with both losses back where they started, under a
    one-cycle rate still rising to its peak: stopped within a few evaluations, not held to the end of
    the rate's decay."""
    acc = [0.1, 0.3, 0.45, 0.55, 0.6, 0.6, 0.4, 0.2, 0.1, *noisy([0.1] * 109, 0.005)]
    val_loss = [2.3, 1.6, 1.3, 1.1, 1.0, 1.0, 1.5, 2.0, 2.3, *noisy([2.303] * 109, 0.003, seed=1)]
    train_loss = [2.3, 1.5, 1.2, 1.0, 0.9, 0.9, 1.4, 2.0, 2.3, *noisy([2.303] * 109, 0.003, seed=2)]
    lr = [0.01 + 0.99 * min(1.0, i / 35) for i in range(118)]
    extras = {"val_loss": val_loss, "train_loss": train_loss, "lr": lr}
    stop = stop_of(judge(DEFAULT_RULES, acc, extras=extras, ctx=plan(118)))
    assert stop is not None
    assert stop.evidence["verdict"] == "chance"
    assert stop.step <= 16
    assert stop.best_step == 4
    assert stop.reason.startswith("m is at chance")


def test_a_run_that_never_learns_is_stopped_after_a_bounded_number_of_evaluations() -> None:
    acc = noisy([0.1] * 100, 0.004)
    losses = {"val_loss": [2.303] * 100, "lr": [0.1] * 100}  # a constant prediction's loss, to the digit
    stop = stop_of(judge(DEFAULT_RULES, acc, extras=losses, ctx=plan(100)))
    assert stop is not None
    assert stop.evidence["verdict"] == "chance"
    assert stop.step == OUTLOOK.get("hold", 12) - 1


def test_a_flat_start_whose_training_loss_falls_is_not_at_chance() -> None:
    """ImageNet runs sit at chance for ten epochs of a slow warm-up while their training loss already falls:
    the model is learning, and the chance verdict waits."""
    acc = [0.001] * 15 + [0.001 + 0.02 * i for i in range(1, 66)]
    train_loss = [6.908 - 0.01 * i for i in range(80)]
    lr = [0.05 * min(1.0, (i + 1) / 30) for i in range(80)]
    stop = stop_of(judge(DEFAULT_RULES, acc, extras={"train_loss": train_loss, "lr": lr}, ctx=plan(80)))
    assert stop is None or stop.step > 40


def test_an_early_peak_is_not_held_to_the_plans_floor_without_evidence() -> None:
    """A run whose best came at step 5 and that gains nothing after is judged once it has shown no evidence
    of learning for 12 evaluations, not at a quarter of a 400-step plan."""
    values = saturating(6, rate=0.8) + [saturating(6, rate=0.8)[-1] - 0.001] * 94
    stop = stop_of(judge(DEFAULT_RULES, values, extras={"lr": [0.1] * 100}, ctx=plan(400)))
    assert stop is not None
    assert stop.step < 0.25 * 400
    assert stop.best_step == 5


def test_a_decaying_rate_holds_a_run_while_it_learns_and_not_after() -> None:
    """Under a rate still above 30% of its peak, a run that keeps setting new bests is held; once it has shown
    no evidence for 12 evaluations the hold lapses, whatever the rate."""
    lr = [1.0 - 0.006 * i for i in range(100)]  # above 30% of its peak to the end
    steady = noisy([0.1 + 0.008 * i for i in range(100)], 0.001)
    assert stop_of(judge(DEFAULT_RULES, steady, extras={"lr": lr}, ctx=plan(100))) is None
    stalled = saturating(30) + [saturating(30)[-1]] * 70
    stop = stop_of(judge(DEFAULT_RULES, stalled, extras={"lr": lr}, ctx=plan(100)))
    assert stop is not None
    assert stop.step < 60


def test_a_falling_validation_loss_holds_a_frozen_accuracy() -> None:
    """An accuracy on 30 samples frozen at 20/30 while its validation loss still falls to new lows: held;
    the same accuracy with the loss frozen too: stopped."""
    accuracy = [k / 30 for k in [10, 14, 17, 19] + [20] * 56]
    falling = {"val_loss": [1.1 - 0.012 * i for i in range(60)]}
    frozen = {"val_loss": [1.1 - 0.1 * min(i, 4) for i in range(60)]}
    assert stop_of(judge(DEFAULT_RULES, accuracy, extras=falling, monitor="val/acc", ctx=plan(60))) is None
    stop = stop_of(judge(DEFAULT_RULES, accuracy, extras=frozen, monitor="val/acc", ctx=plan(60)))
    assert stop is not None
    assert stop.best_step == 4


def test_a_steady_climb_back_holds_a_retreat() -> None:
    """A run that dipped and climbs back steadily toward its best is learning: no retreat while it rises."""
    dip = (
        [0.5, 0.6, 0.7, 0.75] + [0.75 - 0.01 * i for i in range(1, 9)] + [0.67 + 0.004 * i for i in range(60)]
    )
    stop = stop_of(judge(DEFAULT_RULES, dip, extras={"lr": [0.1] * 72}, ctx=plan(72)))
    assert stop is None or stop.step > 30


def test_mode_min_is_the_mirror_of_mode_max() -> None:
    """A loss is judged as the negated accuracy would be: the same verdicts at the same steps."""
    up = noisy(saturating(20, rate=0.25) + [0.8 - 0.01 * i for i in range(60)], 0.002)
    down = [2.0 - v for v in up]
    extras = {"lr": [0.1] * 80}
    a = stop_of(judge(DEFAULT_RULES, up, extras=extras, ctx=plan(80)))
    b = stop_of(judge(DEFAULT_RULES, down, mode="min", extras=extras, ctx=plan(80)))
    assert a is not None
    assert b is not None
    assert (a.step, a.best_step, a.evidence["verdict"]) == (b.step, b.best_step, b.evidence["verdict"])


def test_the_verdicts_do_not_depend_on_the_metrics_units() -> None:
    """A continuous metric judged in other units (scaled and shifted) stops at the same step."""
    values = noisy(saturating(80), 0.004, seed=7)
    base = stop_of(judge(DEFAULT_RULES, values, extras={"lr": [0.1] * 80}, ctx=plan(80)))
    shifted = stop_of(
        judge(DEFAULT_RULES, [7.0 * v + 3.0 for v in values], extras={"lr": [0.1] * 80}, ctx=plan(80))
    )
    assert base is not None
    assert shifted is not None
    assert (base.step, base.best_step) == (shifted.step, shifted.best_step)


def test_without_a_plan_or_a_validation_loss_the_default_is_patience_with_a_relative_margin() -> None:
    """Gains under 0.1% of the best do not count: ten evaluations without a real gain stop the run."""
    values = saturating(30) + [0.9 + 0.00005 * i for i in range(1, 30)]
    stop = stop_of(judge(DEFAULT_RULES, values))
    assert stop is not None
    assert stop.evidence["verdict"] == "patience"
    assert stop.evidence["patience"] == 10
    assert stop.reason.startswith("m stopped improving")
    # The same run with a plan is judged by the outlook's verdicts instead.
    planned = stop_of(judge(DEFAULT_RULES, values, ctx=plan(60)))
    assert planned is None or planned.evidence["verdict"] != "patience"


def test_a_blind_run_is_held_to_half_its_plan_only_while_it_learns() -> None:
    """No rate and no validation loss: a run that still sets a new best every few evaluations is held to
    half its plan (and told so once, where the hold first holds it); one that stopped learning is stopped
    earlier."""
    stairs = [0.5 + 0.02 * (i // 10) for i in range(100)]  # a new best every tenth evaluation
    evaluation = judge(DEFAULT_RULES, stairs, ctx=plan(100))
    alerts = [v for v in evaluation.verdicts if v.action == "alert"]
    assert [a.rule for a in alerts] == ["blind"]
    assert 25 <= alerts[0].step < 50
    assert "from 0.5 of its plan (step 50)" in alerts[0].reason
    stop = stop_of(evaluation)
    assert stop is None or stop.step >= 50
    stalled = saturating(12, rate=0.6) + [saturating(12, rate=0.6)[-1]] * 88
    stop = stop_of(judge(DEFAULT_RULES, stalled, ctx=plan(100)))
    assert stop is not None
    assert stop.step < 50


def test_outlook_ignores_values_that_are_not_finite() -> None:
    rules = [r for r in DEFAULT_RULES if r["rule"] != "non_finite"]
    values = noisy(saturating(100), 0.003)
    holed = [math.nan if i % 7 == 3 else v for i, v in enumerate(values)]
    kept = [(i, v) for i, v in enumerate(holed) if math.isfinite(v)]
    clean_stop = stop_of(judge(rules, [v for _, v in kept], steps=[i for i, _ in kept], ctx=plan(100)))
    holed_stop = stop_of(judge(rules, holed, ctx=plan(100)))
    assert holed_stop is not None
    assert clean_stop is not None
    assert holed_stop.evidence["evaluations"] == clean_stop.evidence["evaluations"]


def test_outlooks_state_stays_small_however_long_the_run() -> None:
    policy = PolicySpec.model_validate({"monitor": "m", "mode": "max", "rules": [OUTLOOK]})
    states = initial_states(policy)
    rng = random.Random(1)
    for start in range(0, 20_000, 500):
        batch = [
            Observation(
                s, 1.0 - 1.0 / (s + 2) + rng.gauss(0, 1e-6), float(s), {"lr": 0.1, "val_loss": 1.0 / (s + 2)}
            )
            for s in range(start, start + 500)
        ]
        evaluation = evaluate(policy, states, batch, Context())
        states = evaluation.states
        if evaluation.stop_step is not None:
            break
    assert len(json.dumps(states)) < 5_000
