"""The engine keeps each rule's best so far: rules with the same improvement test read one best, so
``patience`` and ``checkpoint`` cannot disagree about which step is best, and states stored before the
engine kept it (the best inside each rule's own state) continue as if nothing had changed."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from tracker.policy import Observation, PolicySpec, evaluate, initial_states

_VALUES = st.lists(
    st.one_of(
        st.integers(min_value=0, max_value=6).map(float),
        st.sampled_from([math.nan, math.inf, -math.inf, 2.5, 2.5000000001]),
    ),
    min_size=1,
    max_size=40,
)
_TESTS = st.fixed_dictionaries(
    {
        "min_delta": st.sampled_from([0.0, 0.5, 1.0, 0.1]),
        "relative": st.booleans(),
        "ties": st.sampled_from(["wait", "improve"]),
        "warmup": st.integers(min_value=0, max_value=5),
    }
)


def _observations(values: list[float]) -> list[Observation]:
    return [Observation(step, value, 0.0) for step, value in enumerate(values)]


def _in_chunks(policy: PolicySpec, observations: list[Observation], size: int) -> tuple[list, int | None]:
    """Evaluate as the tracker does: a few points per batch, states stored as JSON between batches."""
    states, verdicts = initial_states(policy), []
    for start in range(0, len(observations), size):
        evaluation = evaluate(policy, states, observations[start : start + size])
        verdicts += evaluation.verdicts
        states = json.loads(json.dumps(evaluation.states))
        if evaluation.stop_step is not None:
            return verdicts, evaluation.stop_step
    return verdicts, None


@settings(max_examples=300, deadline=None)
@given(
    values=_VALUES,
    test=_TESTS,
    patience=st.integers(min_value=1, max_value=4),
    mode=st.sampled_from(["min", "max"]),
    chunk=st.integers(min_value=1, max_value=7),
)
def test_patience_stops_naming_the_step_checkpoint_saved_last(
    values: list[float], test: dict, patience: int, mode: str, chunk: int
) -> None:
    policy = PolicySpec.model_validate(
        {
            "monitor": "m",
            "mode": mode,
            "rules": [{"rule": "checkpoint", **test}, {"rule": "patience", "patience": patience, **test}],
        }
    )
    verdicts, stop_step = _in_chunks(policy, _observations(values), chunk)
    saved = [v.step for v in verdicts if v.action == "checkpoint"]
    if stop_step is not None:
        stop = verdicts[-1]
        assert stop.action == "stop"
        assert stop.rule == "patience"
        if not saved:  # no finite value past the warm-up: nothing saved, and no best named
            assert stop.best_step is None
        else:
            assert stop.best_step == saved[-1]
            assert stop.best_value == values[saved[-1]]
    whole = evaluate(policy, initial_states(policy), _observations(values))
    assert (whole.stop_step, [v.step for v in whole.verdicts]) == (stop_step, [v.step for v in verdicts])


def test_a_warm_up_keeps_steps_before_it_out_of_the_best() -> None:
    """A rule's warm-up is part of its improvement test: checkpoint with warm-up 3 never names step 0,
    while patience without one does, each from its own best."""
    policy = PolicySpec.model_validate(
        {
            "monitor": "m",
            "mode": "min",
            "rules": [{"rule": "checkpoint", "warmup": 3}, {"rule": "patience", "patience": 4}],
        }
    )
    evaluation = evaluate(policy, initial_states(policy), _observations([0.1, 1.0, 0.9, 0.8, 0.85, 0.9]))
    assert [v.step for v in evaluation.verdicts if v.action == "checkpoint"] == [3]
    stop = evaluation.verdicts[-1]
    assert (stop.rule, stop.step, stop.best_step, stop.best_value) == ("patience", 4, 0, 0.1)


def _legacy(states: list[dict]) -> list[dict]:
    """States as the engine stored them before it kept the best: ``best``/``best_step`` in each rule's
    own state, no ``best`` in the wrapper."""
    legacy = []
    for wrapper in states:
        inner = dict(wrapper["s"])
        best = wrapper.get("best")
        if best is not None and inner is not None:
            inner["best"], inner["best_step"] = best
        legacy.append({key: value for key, value in wrapper.items() if key != "best"} | {"s": inner})
    return legacy


def test_states_stored_before_the_engine_kept_the_best_continue_unchanged() -> None:
    policy = PolicySpec.model_validate(
        {
            "monitor": "m",
            "mode": "max",
            "rules": [
                {"rule": "checkpoint", "min_delta": 0.01},
                {"rule": "patience", "patience": 6, "min_delta": 0.01},
                {"rule": "plateau", "warmup": 2, "window": 6},
                {"rule": "threshold", "stop_at": 0.99},
            ],
            "combine": "all",
        }
    )
    curve = _observations([0.5 + 0.4 * (1 - math.exp(-s / 6)) + 0.01 * math.sin(s) for s in range(60)])
    first = evaluate(policy, initial_states(policy), curve[:20])
    assert any(wrapper.get("best") for wrapper in first.states)
    stored = json.loads(json.dumps(first.states))
    today = evaluate(policy, stored, curve[20:])
    yesterday = evaluate(policy, _legacy(stored), curve[20:])
    assert yesterday.verdicts == today.verdicts
    assert yesterday.stop_step == today.stop_step
    assert [v.action for v in today.verdicts].count("checkpoint") >= 1
