"""Every rule is total and bounded: any finite value (a diverging run reaches 1e300) and any legal parameter
give an answer, never an exception, and every point is judged in bounded time.

A rule that raised once made every later batch of its run fail, forever: the trainer spooled everything
after it and no stop was ever decided. A legal ``asha`` factor of 1 + 2**-52 looped forever holding the
write lock. These tests check each rule over generated values and at each parameter's extreme legal values.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from plateau_tracker.server.policy import Context, Observation, PolicySpec, cut_of, evaluate, initial_states
from plateau_tracker.server.policy._registry import RULES
from plateau_tracker.server.schemas._common import json_safe

# The parameters a rule cannot do without; everything else is its default.
REQUIRED: dict[str, dict[str, Any]] = {
    "threshold": {"stop_at": 0.5},
    "divergence": {"factor": 10.0},
    "budget": {"max_steps": 10**6},
    "overfitting": {"train_key": "train"},
    "prechelt": {"train_key": "train"},
}
# Parameters in the metric's own units: any finite value is legal, so only float64's ends bound them.
VALUE_PARAMS = {
    ("threshold", "stop_at"),
    ("divergence", "bound"),
    ("checkpoint", "min_delta"),
    ("patience", "min_delta"),
    ("plateau", "delta"),
    ("no_progress", "delta"),
    ("forecast", "delta"),
}
# Choices that change a rule's work, at the largest legal sizes.
CHOICES: dict[str, list[dict[str, Any]]] = {
    "plateau": [{"test": "mann_kendall", "window": 200}],
    "prechelt": [{"criterion": "PQ", "strip": 1000}, {"criterion": "UP", "strip": 1, "successive": 1000}],
}
EXTRAS = ("train", "lr", "val_loss")
BIGGEST = sys.float_info.max


class _Cohort:
    """Other runs of an experiment, with whatever values the test gives them."""

    def __init__(self, values: list[float], finished: int) -> None:
        self.values = sorted(values)
        self.finished = finished

    def values_at(self, step: int, *, finished_only: bool) -> list[float]:
        return self.values

    def cut_from(self, step: int, q: float) -> tuple[float, int] | None:
        return cut_of(self.values, q)

    def cut_at(self, step: int, q: float) -> tuple[float, int] | None:
        return cut_of(self.values, q)

    def finished_at_least(self, count: int) -> bool:
        return self.finished >= count


def _params_model(name: str) -> type[BaseModel]:
    model: type[BaseModel] = RULES[name].__orig_bases__[0].__args__[0]  # type: ignore[attr-defined]
    return model


def _modes(name: str) -> list[str]:
    return ["min"] if name == "prechelt" else ["min", "max"]


def _policy(name: str, mode: str, **params: Any) -> PolicySpec:
    return PolicySpec.model_validate(
        {"monitor": "m", "mode": mode, "rules": [{"rule": name, **REQUIRED.get(name, {}), **params}]}
    )


def _run(policy: PolicySpec, values: list[float], steps: list[int], ctx: Context) -> list[float]:
    """Judge the points one batch each, as ingest does; per-point seconds. Fails on any exception, or on
    state or evidence that JSON cannot carry.

    The slowest point is judged again, from the same state, and keeps its fastest time: a rule wedged on
    that point is as slow every time, while a pause of the machine's (another process on the core, the
    collector) is not repeated. Measured once, this test failed on a loaded 2-core host."""
    states = initial_states(policy)
    seconds: list[float] = []
    judged: list[tuple[dict[str, Any], Observation]] = []
    for i, (step, value) in enumerate(zip(steps, values, strict=True)):
        extras = {key: values[(i + k + 1) % len(values)] for k, key in enumerate(EXTRAS)}
        obs = Observation(step, value, 1000.0 + step, extras)
        judged.append((states, obs))  # evaluate never changes the states it is given
        started = time.perf_counter()
        evaluation = evaluate(policy, states, [obs], ctx)
        seconds.append(time.perf_counter() - started)
        states = evaluation.states
        json.dumps(json_safe(states), allow_nan=False)
        for verdict in evaluation.verdicts:
            json.dumps(json_safe(verdict.evidence), allow_nan=False)
            assert isinstance(verdict.reason, str)
            assert verdict.reason
    slowest = max(range(len(seconds)), key=seconds.__getitem__)
    before, obs = judged[slowest]
    for _ in range(3):
        started = time.perf_counter()
        evaluate(policy, before, [obs], ctx)
        seconds[slowest] = min(seconds[slowest], time.perf_counter() - started)
    return seconds


_FINITE = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([BIGGEST, -BIGGEST, 1e300, -1e300, 1e155, 5e-324, 0.0, 1.0]),
    st.floats(-2.0, 2.0),
)


@pytest.mark.parametrize(("name", "mode"), [(n, m) for n in RULES for m in _modes(n)])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(_FINITE, min_size=1, max_size=45),
    gaps=st.lists(st.integers(1, 2**40), min_size=45, max_size=45),
    cohort=st.lists(_FINITE, max_size=6),
    planned=st.one_of(st.none(), st.integers(1, 2**62)),
)
def test_every_rule_is_total_over_finite_floats(
    name: str, mode: str, values: list[float], gaps: list[int], cohort: list[float], planned: int | None
) -> None:
    steps = [sum(gaps[: i + 1]) for i in range(len(values))]
    ctx = Context(planned_steps=planned, cohort=_Cohort(cohort, finished=len(cohort)))
    _run(_policy(name, mode), values, steps, ctx)


def _extreme_specs(name: str) -> list[dict[str, Any]]:
    """One spec per numeric parameter and end: the smallest and the largest legal value, the rest default."""
    specs: list[dict[str, Any]] = []
    for field, info in _params_model(name).model_fields.items():
        specs += [{field: end} for end in _ends(name, field, info) if end is not None]
    # The choices that change a rule's work, each with its largest window.
    return specs + CHOICES.get(name, [])


def _ends(name: str, field: str, info: FieldInfo) -> list[float | int | None]:
    """A numeric parameter's smallest and largest legal values (None: unbounded on that end)."""
    kinds = {a for a in (info.annotation, *getattr(info.annotation, "__args__", ())) if a in (int, float)}
    if not kinds:
        return []
    low: float | int | None = None
    high: float | int | None = None
    for bound in info.metadata:
        if getattr(bound, "ge", None) is not None:
            low = bound.ge
        if getattr(bound, "gt", None) is not None:
            low = bound.gt + 1 if int in kinds else math.nextafter(bound.gt, math.inf)
        if getattr(bound, "le", None) is not None:
            high = bound.le
        if getattr(bound, "lt", None) is not None:
            high = bound.lt - 1 if int in kinds else math.nextafter(bound.lt, -math.inf)
    if (name, field) in VALUE_PARAMS:
        return [-BIGGEST if low is None else low, BIGGEST]
    return [low, high]


@pytest.mark.parametrize("name", list(RULES))
def test_every_numeric_parameter_is_bounded_on_both_ends(name: str) -> None:
    # A parameter that can grow without bound can grow a rule's work per point, or its state, with it.
    unbounded = [
        field for field, info in _params_model(name).model_fields.items() if None in _ends(name, field, info)
    ]
    assert unbounded == []


@pytest.mark.parametrize(
    ("name", "params"), [(name, params) for name in RULES for params in _extreme_specs(name)]
)
def test_extreme_legal_parameters_judge_each_point_in_bounded_time(name: str, params: dict[str, Any]) -> None:
    policy = _policy(name, "min", **params)
    # Values that climb, collapse and jump between float64's ends, at steps from 1 to 2**62, with a cohort.
    values = [1.0 / (1 + i) for i in range(1100)] + [BIGGEST, -BIGGEST, 1e-300, 0.0] * 25
    steps = [1 + 7 * i for i in range(1100)] + [2**40 + i * 2**50 for i in range(100)]
    cohort = _Cohort([0.1 * i for i in range(50)], finished=50)
    seconds = _run(policy, values, steps, Context(planned_steps=2**62, cohort=cohort))
    # Far above any rule's real cost (tens of microseconds), far below "wedged".
    assert max(seconds) < 0.25, f"{name} {params}: slowest point took {max(seconds):.3f} s"
    assert sum(seconds) < 60.0


def test_a_factor_near_one_no_longer_wedges_asha() -> None:
    with pytest.raises(ValueError, match="reduction_factor"):
        _policy("asha", "max", reduction_factor=1.0000000000000002)


def test_mann_kendall_windows_are_bounded_by_their_quadratic_cost() -> None:
    with pytest.raises(ValueError, match="mann_kendall"):
        _policy("plateau", "min", test="mann_kendall", window=201)


def test_a_rule_that_raises_is_reported_once_and_the_others_go_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from plateau_tracker.server.policy.rules._patience import Patience

    def broken(self: Patience, state: Any, obs: Observation, ctx: Context) -> Any:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(Patience, "observe", broken)
    policy = PolicySpec.model_validate(
        {"monitor": "m", "rules": [{"rule": "patience", "patience": 2}, {"rule": "non_finite"}]}
    )
    states = initial_states(policy)
    verdicts = []
    for step, value in enumerate([1.0, 0.5, 0.7, math.nan]):
        evaluation = evaluate(policy, states, [Observation(step, value, 0.0)])
        states, verdicts = evaluation.states, verdicts + evaluation.verdicts
    assert [(v.action, v.rule, v.step) for v in verdicts] == [
        ("alert", "patience", 0),
        ("stop", "non_finite", 3),
    ]
    assert "ZeroDivisionError" in verdicts[0].reason
    assert "could not judge m at step 0" in verdicts[0].reason
