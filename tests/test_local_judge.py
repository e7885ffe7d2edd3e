"""While the tracker is away the SDK judges what needs only the run's own values, with the tracker's own
definitions: on any sequence (NaN, infinities, ties, margins, warm-ups) its checkpoints and its stop are the
tracker's engine's, step for step."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from plateau_tracker._local_judge import LocalJudge
from plateau_tracker.server.policy import Observation, PolicySpec, evaluate, initial_states

_VALUES = st.lists(
    st.one_of(
        st.integers(min_value=0, max_value=6).map(float),
        st.sampled_from([math.nan, math.inf, -math.inf, 2.5, 2.5000000001, 0.1 + 0.2, 0.3]),
    ),
    min_size=1,
    max_size=40,
)
_TEST = {
    "min_delta": st.sampled_from([0.0, 0.5, 1.0, 0.1]),
    "relative": st.booleans(),
    "ties": st.sampled_from(["wait", "improve"]),
    "warmup": st.integers(min_value=0, max_value=5),
}
_RULES = st.lists(
    st.one_of(
        st.fixed_dictionaries({"rule": st.just("checkpoint"), **_TEST}),
        st.fixed_dictionaries(
            {"rule": st.just("patience"), "patience": st.integers(min_value=1, max_value=4), **_TEST}
        ),
        st.just({"rule": "non_finite"}),
        st.fixed_dictionaries(
            {
                "rule": st.just("threshold"),
                "stop_at": st.sampled_from([0.0, 1.0, 2.5, 5.0]),
                "warmup": st.integers(min_value=0, max_value=5),
            }
        ),
    ),
    min_size=1,
    max_size=4,
)


def _tracker(rules: list[dict[str, Any]], mode: str, values: list[float]) -> tuple[list[int], Any]:
    """The tracker engine's checkpoint steps and its stop (step, rule, best step), as it judges a run."""
    policy = PolicySpec.model_validate({"monitor": "m", "mode": mode, "rules": rules})
    observations = [Observation(step, value, 0.0) for step, value in enumerate(values)]
    evaluation = evaluate(policy, initial_states(policy), observations)
    checkpoints = sorted({v.step for v in evaluation.verdicts if v.action == "checkpoint"})
    stops = [(v.step, v.rule, v.best_step) for v in evaluation.verdicts if v.action == "stop"]
    return checkpoints, stops[0] if stops else None


def _sdk(rules: list[dict[str, Any]], mode: str, values: list[float]) -> tuple[list[int], Any]:
    judge = LocalJudge("m", mode, rules)  # type: ignore[arg-type]
    checkpoints = []
    for step, value in enumerate(values):
        judge.observe(step, value)
        if judge.checkpointed:
            checkpoints.append(step)
        if judge.stopped is not None:
            stop = judge.stopped
            return checkpoints, (stop.step, stop.rule, stop.best_step)
    return checkpoints, None


@settings(max_examples=500, deadline=None)
@given(values=_VALUES, rules=_RULES, mode=st.sampled_from(["min", "max"]))
def test_the_sdk_judges_as_the_tracker_does(
    values: list[float], rules: list[dict[str, Any]], mode: str
) -> None:
    assert _sdk(rules, mode, values) == _tracker(rules, mode, values)


def test_rules_that_need_the_tracker_are_named_and_not_judged() -> None:
    rules = [{"rule": "checkpoint"}, {"rule": "outlook"}, {"rule": "patience", "patience": 2, "ema": 0.5}]
    judge = LocalJudge("m", "min", rules)
    assert judge.waiting == ["outlook", "patience"]
    for step, value in enumerate([1.0, 2.0, 3.0, 4.0]):
        judge.observe(step, value)
    assert judge.stopped is None


def test_under_combine_all_only_guards_stop_alone() -> None:
    rules = [{"rule": "patience", "patience": 1}, {"rule": "non_finite"}, {"rule": "checkpoint"}]
    judge = LocalJudge("m", "min", rules, combine="all")
    for step, value in enumerate([1.0, 2.0, 3.0]):
        judge.observe(step, value)
    assert judge.stopped is None
    judge.observe(3, math.nan)
    assert judge.stopped is not None
    assert (judge.stopped.rule, judge.stopped.step, judge.stopped.best_step) == ("non_finite", 3, 0)
