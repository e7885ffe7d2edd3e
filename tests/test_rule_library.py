"""Every rule by table: (values, params) -> (action, step, reason); plus EMA and combine."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from plateau_tracker.server.policy import Context, Observation, PolicySpec, cut_of, evaluate, initial_states
from tests._reasons import detail

NAN = math.nan


def judge(
    rules, values, *, mode="max", extras=None, ctx=None, combine="any", steps=None, walls=None, monitor="m"
):
    policy = PolicySpec.model_validate({"monitor": monitor, "mode": mode, "rules": rules, "combine": combine})
    steps = steps or list(range(len(values)))
    observations = [
        Observation(s, v, walls[i] if walls else float(s), {k: col[i] for k, col in (extras or {}).items()})
        for i, (s, v) in enumerate(zip(steps, values, strict=True))
    ]
    return evaluate(policy, initial_states(policy), observations, ctx)


def stop_of(evaluation):
    stops = [v for v in evaluation.verdicts if v.action == "stop"]
    return stops[0] if stops else None


class ListCohort:
    def __init__(
        self,
        finished: dict[int, list[float]],
        everyone: dict[int, list[float]] | None = None,
        count: int | None = None,
    ) -> None:
        self.finished = finished
        self.everyone = everyone if everyone is not None else finished
        self.count = count if count is not None else max((len(v) for v in finished.values()), default=0)

    def values_at(self, step, *, finished_only):
        return sorted((self.finished if finished_only else self.everyone).get(step, []))

    def values_from(self, step, *, finished_only):
        # Runs evaluated on one common grid: their first points at or after `step` share a step.
        table = self.finished if finished_only else self.everyone
        later = [s for s in table if s >= step]
        return sorted(table[min(later)]) if later else []

    def cut_at(self, step, q):
        return cut_of(self.values_at(step, finished_only=True), q)

    def cut_from(self, step, q):
        return cut_of(self.values_from(step, finished_only=False), q)

    def finished_at_least(self, count):
        return self.count >= count


TABLE = [
    # (id, rules, values, mode, kwargs, expected stop step or None, rule, words in the reason)
    (
        "threshold-max",
        [{"rule": "threshold", "stop_at": 0.9}],
        [0.5, 0.8, 0.91, 0.95],
        "max",
        {},
        2,
        "threshold",
        "reached 0.91 at step 2 (target 0.9)",
    ),
    (
        "threshold-min",
        [{"rule": "threshold", "stop_at": 0.1}],
        [1.0, 0.5, 0.1],
        "min",
        {},
        2,
        "threshold",
        "target 0.1",
    ),
    ("threshold-nan", [{"rule": "threshold", "stop_at": 0.9}], [0.5, NAN, 0.6], "max", {}, None, None, ""),
    (
        "divergence-bound",
        [{"rule": "divergence", "bound": 10.0}],
        [5.0, 4.0, 11.0],
        "min",
        {},
        2,
        "divergence",
        "past the bound 10",
    ),
    (
        "divergence-factor",
        [{"rule": "divergence", "factor": 1.0}],
        [2.0, 1.0, 1.9, 2.5],
        "min",
        {},
        3,
        "divergence",
        "worse than its best 1 (step 1) by more than 1 x |best|",
    ),
    (
        "divergence-warmup",
        [{"rule": "divergence", "bound": 10.0, "warmup": 3}],
        [50.0, 4.0, 11.0, 3.0],
        "min",
        {},
        None,
        None,
        "",
    ),
    (
        "budget-steps",
        [{"rule": "budget", "max_steps": 3}],
        [1.0, 1.0, 1.0, 1.0, 1.0],
        "min",
        {},
        3,
        "budget",
        "step budget 3",
    ),
    (
        "budget-wall",
        [{"rule": "budget", "max_wall_seconds": 25}],
        [1.0] * 5,
        "min",
        {"walls": [100, 110, 120, 130, 140]},
        3,
        "budget",
        "time budget 25 s",
    ),
    (
        "plateau-flat",
        [{"rule": "plateau", "window": 8, "delta": 0.1}],
        [0.1, 0.3, 0.5, 0.7, 0.80, 0.81, 0.80, 0.81, 0.80, 0.81, 0.80, 0.81, 0.80],
        "max",
        {},
        11,
        "plateau",
        "flat over its last 8 points",
    ),
    (
        "plateau-rising",
        [{"rule": "plateau", "window": 8, "delta": 0.1}],
        [0.1 * i for i in range(15)],
        "max",
        {},
        None,
        None,
        "",
    ),
    (
        "plateau-mk",
        [{"rule": "plateau", "window": 10, "delta": 0.05, "test": "mann_kendall"}],
        [0.5, 0.52, 0.51, 0.5, 0.52, 0.51, 0.5, 0.52, 0.51, 0.5],
        "max",
        {},
        9,
        "plateau",
        "mann_kendall",
    ),
    (
        "gl",
        [{"rule": "prechelt", "criterion": "GL", "alpha": 5}],
        [1.0, 0.8, 0.82, 0.85],
        "min",
        {},
        3,
        "prechelt",
        "generalization loss GL = 6.25 > 5",
    ),
    (
        "up",
        [{"rule": "prechelt", "criterion": "UP", "strip": 2, "successive": 2}],
        [1.0, 0.8, 0.7, 0.9, 0.8, 1.0],
        "min",
        {},
        5,
        "prechelt",
        "rose at the end of 2 successive strips",
    ),
    (
        "at-chance",
        [{"rule": "outlook", "hold": 4, "window": 3, "fallback_patience": None}],
        [0.318, 0.327, 0.318, 0.327, 0.318, 0.327, 0.318, 0.327],
        "max",
        {},
        3,  # its fourth evaluation: the mean of the last three is within its noise of the first value
        "outlook",
        "of its first value 0.318",
    ),
    (
        "learning-not-at-chance",
        [{"rule": "outlook", "hold": 4, "window": 3, "fallback_patience": None}],
        [0.5, 0.61, 0.63, 0.64, 0.645, 0.652],
        "max",
        {},
        None,
        None,
        "",
    ),
    (
        "no-progress",
        [{"rule": "no_progress", "patience": 3, "delta": 0.01}],
        [0.1, 0.1, 0.102, 0.1, 0.1],
        "max",
        {},
        2,
        "no_progress",
        "not learning",
    ),
    (
        "no-progress-learns",
        [{"rule": "no_progress", "patience": 3, "delta": 0.01}],
        [0.1, 0.1, 0.3, 0.3, 0.3, 0.3],
        "max",
        {},
        None,
        None,
        "",
    ),
]


@pytest.mark.parametrize(
    ("id_", "rules", "values", "mode", "kwargs", "step", "rule", "words"),
    TABLE,
    ids=[row[0] for row in TABLE],
)
def test_rule_table(id_, rules, values, mode, kwargs, step, rule, words) -> None:
    stop = stop_of(judge(rules, values, mode=mode, **kwargs))
    if step is None:
        assert stop is None, stop
    else:
        assert stop is not None
        assert (stop.step, stop.rule) == (step, rule)
        assert words in detail(stop)
        json.dumps(stop.evidence)  # machine-readable


def test_pq_needs_training_progress_to_stall() -> None:
    val = [1.0, 0.8, 0.85, 0.9, 0.95, 1.0]
    rules = [{"rule": "prechelt", "criterion": "PQ", "alpha": 0.5, "strip": 2, "train_key": "train"}]
    learning = judge(rules, val, mode="min", extras={"train": [1.0, 0.5, 0.4, 0.2, 0.1, 0.05]})
    stalled = judge(rules, val, mode="min", extras={"train": [1.0, 0.5, 0.5, 0.5, 0.5, 0.5]})
    assert stop_of(stalled) is not None
    assert stop_of(stalled).evidence["P_k"] == 0.0
    # Fast training progress keeps GL/P_k small for longer.
    assert stop_of(learning) is None or stop_of(learning).step > stop_of(stalled).step


def test_overfitting_needs_both_trends() -> None:
    val = [0.5, 0.45, 0.4, 0.42, 0.44, 0.46, 0.48, 0.5, 0.52, 0.54]
    rules = [{"rule": "overfitting", "train_key": "train/loss", "window": 6}]
    train_better = [1.0 - 0.05 * i for i in range(10)]
    train_flat = [0.5, 0.51, 0.5, 0.51, 0.5, 0.51, 0.5, 0.51, 0.5, 0.51]
    stop = stop_of(judge(rules, val, mode="min", extras={"train/loss": train_better}))
    assert stop is not None
    assert "overfitting" in detail(stop)
    assert stop.best_step == 2
    assert stop_of(judge(rules, val, mode="min", extras={"train/loss": train_flat})) is None


def test_forecast_waits_for_the_schedule_and_uses_the_plan() -> None:
    flat = [0.5, 0.6, 0.65, 0.66, 0.661, 0.662, 0.661, 0.662, 0.662, 0.661, 0.662, 0.661]
    rules = [{"rule": "forecast", "window": 6, "delta": 0.01, "min_progress": 0.0}]
    assert stop_of(judge(rules, flat, ctx=Context(planned_steps=20))) is not None
    with_lr = [{**rules[0], "lr_key": "lr", "lr_fraction": 0.2}]
    lr_high = {"lr": [1.0] * len(flat)}
    assert stop_of(judge(with_lr, flat, extras=lr_high, ctx=Context(planned_steps=20))) is None
    lr_decayed = {"lr": [1.0, 1.0, 0.9, 0.8, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05, 0.01]}
    stop = stop_of(judge(with_lr, flat, extras=lr_decayed, ctx=Context(planned_steps=20)))
    assert stop is not None
    assert stop.step >= 8
    rising = [0.1 * i for i in range(12)]
    assert stop_of(judge(rules, rising, ctx=Context(planned_steps=20))) is None


def test_percentile_reads_its_old_warmup_name_and_refuses_both_names() -> None:
    """``warmup`` was ``warmup_steps`` in percentile alone: the old name is read as ``warmup``, and a rule
    that gives both is refused, naming the old one (one value, never a silent pick)."""
    old = PolicySpec.model_validate({"monitor": "m", "rules": [{"rule": "percentile", "warmup_steps": 3}]})
    assert old.rules[0].model_dump()["warmup"] == 3
    assert "warmup_steps" not in old.rules[0].model_dump()
    with pytest.raises(ValidationError, match="warmup_steps"):
        PolicySpec.model_validate(
            {"monitor": "m", "rules": [{"rule": "percentile", "warmup": 2, "warmup_steps": 3}]}
        )


def test_percentile_prunes_against_finished_runs_at_the_same_step() -> None:
    cohort = ListCohort({s: [0.5 + 0.1 * s, 0.6 + 0.1 * s, 0.7 + 0.1 * s] for s in range(5)}, count=3)
    rules = [{"rule": "percentile", "n_startup_runs": 3, "warmup": 2}]
    stop = stop_of(judge(rules, [0.1, 0.2, 0.3, 0.9], ctx=Context(cohort=cohort)))
    assert stop is not None
    assert stop.step == 2  # not before warmup
    assert "50th-percentile cut 0.8 of 3 finished runs" in detail(stop)
    good = stop_of(judge(rules, [0.9, 1.0, 1.1, 1.2], ctx=Context(cohort=cohort)))
    assert good is None
    too_few = ListCohort(cohort.finished, count=2)
    assert stop_of(judge(rules, [0.1, 0.2, 0.3], ctx=Context(cohort=too_few))) is None


def test_asha_keeps_the_top_third_at_each_rung() -> None:
    everyone = {1: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], 3: [0.5, 0.6, 0.7]}
    cohort = ListCohort({}, everyone, count=0)
    rules = [{"rule": "asha", "min_step": 1, "reduction_factor": 3}]
    stop = stop_of(judge(rules, [0.0, 0.3, 0.9], ctx=Context(cohort=cohort)))
    assert stop is not None
    assert (stop.step, stop.evidence["rung"]) == (1, 1)
    survivor = stop_of(judge(rules, [0.0, 0.6, 0.8, 0.75], ctx=Context(cohort=cohort)))
    assert survivor is None


def test_asha_judges_rungs_at_the_first_checkpoint_past_them() -> None:
    # Checkpoints every 1,000 steps never land on rungs 1, 3, ..., 729, 2187: each rung is judged at the
    # first checkpoint past it, against the other runs' values there.
    cohort = ListCohort({}, {1000: [0.5, 0.6, 0.7, 0.8, 0.9, 0.95], 3000: [0.8, 0.9, 0.95]}, count=0)
    rules = [{"rule": "asha", "min_step": 1, "reduction_factor": 3}]
    steps = [1000, 2000, 3000, 4000]
    stop = stop_of(judge(rules, [0.55, 0.7, 0.8, 0.9], ctx=Context(cohort=cohort), steps=steps))
    assert stop is not None
    assert (stop.step, stop.evidence["rung"]) == (1000, 729)
    assert stop.evidence["rungs_passed_here"] == [1, 3, 9, 27, 81, 243]
    # In the top third at 1,000 (rung 729), not at 3,000 (rung 2187).
    later = stop_of(judge(rules, [0.92, 0.93, 0.85, 0.99], ctx=Context(cohort=cohort), steps=steps))
    assert later is not None
    assert (later.step, later.evidence["rung"], later.evidence["runs_at_rung"]) == (3000, 2187, 3)


class GrowingCohort(ListCohort):
    """The cohort as the run meets it over time: nobody had reached a rung when the run passed it, but
    others had reached the later rungs by the time the run got there (values keyed by rung)."""

    def values_from(self, step, *, finished_only):
        return sorted(self.everyone.get(step, []))


def test_asha_says_which_rungs_had_nobody_to_compare_with() -> None:
    rules = [{"rule": "asha", "min_step": 10, "reduction_factor": 2, "max_step": 1000}]
    nobody = GrowingCohort({}, {}, count=0)
    assert stop_of(judge(rules, [0.1, 0.2, 0.3], ctx=Context(cohort=nobody), steps=[10, 20, 40])) is None
    cohort = GrowingCohort({}, {80: [0.8, 0.9, 0.95]}, count=0)
    stop = stop_of(judge(rules, [0.9, 0.91, 0.92, 0.5], ctx=Context(cohort=cohort), steps=[10, 20, 40, 80]))
    assert stop is not None
    assert (stop.step, stop.evidence["rung"], stop.evidence["uncompared_rungs"]) == (80, 80, [10, 20, 40])


def test_ema_smooths_what_a_rule_sees() -> None:
    noisy = [1.0, 0.6, 0.9, 0.8, 0.5, 0.75, 0.7, 0.4]
    raw = stop_of(judge([{"rule": "patience", "patience": 2}], noisy, mode="min"))
    smoothed = stop_of(judge([{"rule": "patience", "patience": 2, "ema": 0.3}], noisy, mode="min"))
    assert raw is not None
    assert smoothed is None  # the trend is down; only the raw zig-zag looks stuck


def test_a_smoothed_rule_and_raw_rules_keep_their_own_bests_in_one_policy() -> None:
    """The engine moves the raw values' best once per observation and a smoothed rule's best from the value
    it smoothed: together in one policy, each judges as it does alone, over batches of any size."""
    noisy = [1.0, 0.6, 0.9, 0.8, 0.5, 0.75, 0.7, 0.4, 0.45, 0.5, 0.42, 0.44, 0.46, 0.48] + [0.5] * 8
    smoothed = {"rule": "patience", "patience": 3, "ema": 0.3}
    raw = {"rule": "patience", "patience": 4}

    def checkpoints(evaluation):
        return [v.step for v in evaluation.verdicts if v.action == "checkpoint"]

    alone_checkpoints = checkpoints(judge([{"rule": "checkpoint"}], noisy, mode="min"))
    for rules in ([smoothed, {"rule": "checkpoint"}], [{"rule": "checkpoint"}, smoothed, raw]):
        together = judge(rules, noisy, mode="min")
        stop = stop_of(together)
        alone = [stop_of(judge([r], noisy, mode="min")) for r in rules if r["rule"] == "patience"]
        first = min((s for s in alone if s is not None), key=lambda s: s.step, default=None)
        assert (stop.step, stop.best_step) == (first.step, first.best_step)
        assert checkpoints(together) == [s for s in alone_checkpoints if s <= stop.step]


def test_combine_all_waits_for_every_convergence_rule_but_not_guards() -> None:
    rules = [
        {"rule": "patience", "patience": 2},
        {"rule": "threshold", "stop_at": 100.0},
        {"rule": "plateau", "window": 5, "delta": 0.05},
    ]
    values = [0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]
    any_stop = stop_of(judge(rules, values))
    all_stop = stop_of(judge(rules, values, combine="all"))
    assert any_stop.rule == "patience"
    assert any_stop.step == 3
    assert all_stop.rule == "all"
    assert all_stop.step == 5
    assert "patience:" in detail(all_stop)
    assert "plateau:" in detail(all_stop)
    guard = stop_of(judge([*rules, {"rule": "non_finite"}], [0.5, 0.6, NAN], combine="all"))
    assert guard.rule == "non_finite"


@pytest.mark.parametrize(
    ("policy", "loc"),
    [
        ({"monitor": "m", "mode": "max", "rules": [{"rule": "prechelt"}]}, ()),
        ({"monitor": "m", "rules": [{"rule": "divergence"}]}, ("rules", 0, "divergence")),
        ({"monitor": "m", "rules": [{"rule": "budget"}]}, ("rules", 0, "budget")),
        ({"monitor": "m", "rules": [{"rule": "outlook", "unlearned": True}]}, ("rules", 0, "outlook")),
        ({"monitor": "m", "rules": [{"rule": "plateau", "alpha": 0.7}]}, ("rules", 0, "plateau", "alpha")),
        ({"monitor": "m", "rules": [{"rule": "plateau", "window": 2}]}, ("rules", 0, "plateau", "window")),
        ({"monitor": "m", "rules": [{"rule": "overfitting"}]}, ("rules", 0, "overfitting", "train_key")),
        (
            {"monitor": "m", "rules": [{"rule": "asha", "reduction_factor": 1}]},
            ("rules", 0, "asha", "reduction_factor"),
        ),
        ({"monitor": "m", "rules": [{"rule": "patience", "ema": 0}]}, ("rules", 0, "patience", "ema")),
        ({"monitor": "m", "combine": "most"}, ("combine",)),
    ],
)
def test_bad_parameters_are_refused_with_their_place(policy, loc) -> None:
    with pytest.raises(ValidationError) as info:
        PolicySpec.model_validate(policy)
    assert info.value.errors()[0]["loc"][: len(loc)] == loc


ALL_RULES = [
    {"rule": "patience", "patience": 3},
    {"rule": "checkpoint"},
    {"rule": "non_finite"},
    {"rule": "plateau", "window": 6, "noise_factor": 2.0},
    {"rule": "divergence", "factor": 5.0},
    {"rule": "prechelt", "criterion": "PQ", "strip": 3, "train_key": "t", "alpha": 0.5},
    {"rule": "overfitting", "train_key": "t", "window": 5},
    {"rule": "no_progress", "patience": 4},
    {"rule": "forecast", "window": 5, "delta": 0.01, "planned_steps": 40},
    {"rule": "outlook", "hold": 4, "window": 3, "min_progress": 0, "relative_delta": 0.2},
    {"rule": "outlook", "hold": 4, "lr_key": "t", "lr_fraction": 0.5, "fallback_patience": None},
    {"rule": "outlook", "hold": 3, "window": 2, "loss_key": "t", "train_key": "t", "settle": 1},
    {"rule": "budget", "max_steps": 35},
]


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.one_of(st.floats(0.01, 2.0), st.just(NAN)), min_size=1, max_size=40),
    cuts=st.lists(st.integers(1, 39), max_size=4),
    combine=st.sampled_from(["any", "all"]),
    ema=st.sampled_from([None, 0.5]),
)
def test_incremental_state_gives_the_same_decisions_as_from_scratch(values, cuts, combine, ema) -> None:
    rules = [{**r, "ema": ema} if r["rule"] == "patience" else r for r in ALL_RULES]
    for rule in rules:  # one convergence rule at a time, so "all" is reachable and each rule's state is used
        policy = PolicySpec.model_validate(
            {"monitor": "m", "mode": "min", "rules": [rule, {"rule": "checkpoint"}], "combine": combine}
        )
        obs = [Observation(i, v, float(i), {"t": 1.0 / (i + 1)}) for i, v in enumerate(values)]
        whole = evaluate(policy, initial_states(policy), obs)
        states, verdicts = initial_states(policy), []
        bounds = sorted({0, *[c for c in cuts if c < len(obs)], len(obs)})
        for lo, hi in itertools.pairwise(bounds):
            part = evaluate(policy, json.loads(json.dumps(states)), obs[lo:hi])  # stored and reloaded
            states, verdicts = part.states, verdicts + part.verdicts
            if part.stop_step is not None:
                break
        assert [(v.action, v.step, v.rule, v.reason) for v in verdicts] == [
            (v.action, v.step, v.rule, v.reason) for v in whole.verdicts
        ]


def test_straggler_alerts_once_through_noise_with_hysteresis() -> None:
    from plateau_tracker.server.policy import evaluate_health, evaluate_per_rank

    assert evaluate_health is evaluate_per_rank  # the old name stays, as an alias
    policy = PolicySpec.model_validate(
        {"monitor": "loss", "rules": [{"rule": "straggler", "bound": 0.75, "reports": 3}]}
    )
    rel = {0: [1.0] * 12, 1: [0.95] * 12, 2: [0.3, 0.3, 0.3, 0.9, 0.3, 0.3, 0.9, 0.9, 0.3, 0.9, 0.9, 0.9]}
    points = [Observation(s, rel[r][s], float(s), {}, r) for s in range(12) for r in rel]
    states, verdicts = evaluate_per_rank(policy, initial_states(policy), {"dist/rel_perf": points})
    assert [(v.step, v.evidence["rank"]) for v in verdicts] == [(2, 2)]
    assert states[0]["s"]["flagged"] == []  # three good reports in a row cleared it at the end
