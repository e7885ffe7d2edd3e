"""The pure rules, by table and by property, with no server."""

from __future__ import annotations

import copy
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from plateau_tracker.server.policy import Observation, PolicySpec, evaluate, initial_states
from plateau_tracker.server.policy.presets import preset
from tests.patience_cases import CASES, Case, founding_stop


def run_policy(case_mode: str, rules: list[dict], values: list[float]):
    policy = PolicySpec.model_validate({"monitor": "m", "mode": case_mode, "rules": rules})
    observations = [Observation(step, value, 0.0) for step, value in enumerate(values)]
    return evaluate(policy, initial_states(policy), observations)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_patience_table(case: Case) -> None:
    evaluation = run_policy(case.mode, case.rules, case.values)
    stops = [v for v in evaluation.verdicts if v.action == "stop"]
    assert evaluation.stop_step == case.stop_step
    if case.stop_step is None:
        assert stops == []
    else:
        assert len(stops) == 1
        assert stops[0].step == case.stop_step
        assert stops[0].best_step == case.best_step
        assert stops[0].rule == case.rule
    assert [v.step for v in evaluation.verdicts if v.action == "checkpoint"] == case.checkpoints


@settings(max_examples=400, deadline=None)
@given(
    values=st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=30),
    k=st.integers(min_value=1, max_value=5),
    mode=st.sampled_from(["max", "min"]),
)
def test_patience_is_the_founding_rule(values: list[int], k: int, mode: str) -> None:
    """min_delta=0, ties="improve": stop at n+k exactly when M(n) > max(M(n+1..n+k)) first holds."""
    signed = [float(v) if mode == "max" else -float(v) for v in values]
    expected = founding_stop(signed, k)
    evaluation = run_policy(
        mode, [{"rule": "patience", "patience": k, "ties": "improve"}], [float(v) for v in values]
    )
    assert evaluation.stop_step == expected
    if expected is not None:
        assert evaluation.verdicts[-1].best_step == expected - k


def test_stop_sentence_and_evidence() -> None:
    evaluation = run_policy(
        "max", [{"rule": "patience", "patience": 5}], [0.97, 0.9812, 0.95, 0.96, 0.97, 0.98, 0.9812]
    )
    stop = evaluation.verdicts[-1]
    assert stop.reason == "m has not improved on 0.9812 (step 1) for 5 evaluations (patience 5)"
    assert stop.evidence["wait"] == 5
    assert stop.evidence["best"] == 0.9812
    assert stop.evidence["threshold"] == 0.9812


def test_relative_delta_sentence_names_the_margin() -> None:
    evaluation = run_policy(
        "max",
        [{"rule": "patience", "patience": 2, "min_delta": 0.05, "relative": True}],
        [100, 104, 110, 114, 115],
    )
    assert "by more than 0.05 x |best|" in evaluation.verdicts[-1].reason
    assert evaluation.verdicts[-1].evidence["threshold"] == pytest.approx(115.5)


def test_state_is_small_and_serialisable_whatever_the_length() -> None:
    evaluation = run_policy(
        "min",
        [{"rule": "patience", "patience": 10**6}, {"rule": "checkpoint"}],
        [math.sin(i) for i in range(5000)],
    )
    for state in evaluation.states:
        assert len(repr(state)) < 200


def test_evaluate_leaves_the_states_it_was_given_unchanged() -> None:
    """Rules that work in place (forecast, outlook) do so on evaluate's private copy: judging the same
    states twice gives the same answer, and the caller's states (stored, or shared by a replay) stay put."""
    policy = preset("default", monitor="m", mode="min")
    curve = [Observation(s, 1.0 + 0.5 ** (s / 10), 0, {"lr": 0.1 * 0.97**s}) for s in range(300)]
    before = evaluate(policy, initial_states(policy), curve[:50]).states
    snapshot = copy.deepcopy(before)
    first = evaluate(policy, before, curve[50:])
    second = evaluate(policy, before, curve[50:])
    assert before == snapshot
    assert first == second
    assert [s["s"]["recent"] for s in first.states if "recent" in s["s"]] != [
        s["s"]["recent"] for s in snapshot if "recent" in s["s"]
    ]


def test_rules_are_silent_after_stop() -> None:
    policy = PolicySpec.model_validate(
        {"monitor": "m", "mode": "min", "rules": [{"rule": "patience", "patience": 1}]}
    )
    first = evaluate(policy, initial_states(policy), [Observation(0, 1.0, 0), Observation(1, 2.0, 0)])
    assert first.stop_step == 1
    later = evaluate(policy, first.states, [Observation(2, 3.0, 0), Observation(3, 4.0, 0)])
    assert later.verdicts == []


@pytest.mark.parametrize(
    ("rule", "loc"),
    [
        ({"rule": "patience", "patience": 0}, ("rules", 0, "patience", "patience")),
        ({"rule": "patience", "min_delta": -1}, ("rules", 0, "patience", "min_delta")),
        ({"rule": "patience", "ties": "maybe"}, ("rules", 0, "patience", "ties")),
        ({"rule": "patience", "patiense": 3}, ("rules", 0, "patience", "patiense")),
        ({"rule": "nonsense"}, ("rules", 0)),
    ],
)
def test_bad_parameters_name_the_field(rule: dict, loc: tuple) -> None:
    with pytest.raises(ValidationError) as info:
        PolicySpec.model_validate({"monitor": "m", "rules": [rule]})
    assert info.value.errors()[0]["loc"] == loc
