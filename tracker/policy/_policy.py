"""A run's policy and the pure evaluation of it over new observations."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tracker.policy._base import State
from tracker.policy._registry import RuleSpec, build_rule
from tracker.policy._types import Mode, Observation, Verdict
from tracker.policy.rules._checkpoint import CheckpointParams
from tracker.policy.rules._non_finite import NonFiniteParams
from tracker.policy.rules._patience import PatienceParams


def default_rules() -> list[RuleSpec]:
    """Patience 5, checkpoint on each new best, stop on NaN/inf."""
    return [PatienceParams(), CheckpointParams(), NonFiniteParams()]


class PolicySpec(BaseModel):
    """What to watch and how to judge it: ``{monitor, mode, rules, combine}``.

    ``monitor`` is the metric key judged (rank 0's value). Rules run in order on each new step of it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    monitor: str = Field(min_length=1, max_length=250)
    mode: Mode = "min"
    rules: list[RuleSpec] = Field(default_factory=default_rules, max_length=32)
    combine: Literal["any"] = Field(default="any", description="any stop rule stops the run")


@dataclass(frozen=True)
class Evaluation:
    """The outcome of judging a run's new observations."""

    states: list[State]
    verdicts: list[Verdict]
    stop_step: int | None
    last_step: int | None


def initial_states(policy: PolicySpec) -> list[State]:
    return [build_rule(p, monitor=policy.monitor, mode=policy.mode).initial_state() for p in policy.rules]


def evaluate(policy: PolicySpec, states: Sequence[State], observations: Iterable[Observation]) -> Evaluation:
    """Run every rule over ``observations`` (in step order) from ``states``; stop at the first stop verdict.

    Pure: no I/O, no clock. ``states`` must be one per rule, as returned by a previous evaluation or by
    :func:`initial_states`.
    """
    rules = [build_rule(p, monitor=policy.monitor, mode=policy.mode) for p in policy.rules]
    if len(states) != len(rules):
        raise ValueError(f"expected {len(rules)} rule states, got {len(states)}")
    current: list[dict[str, Any]] = list(states)
    verdicts: list[Verdict] = []
    last_step: int | None = None
    for obs in sorted(observations, key=lambda o: o.step):
        last_step = obs.step
        stop = False
        for index, rule in enumerate(rules):
            current[index], verdict = rule.observe(current[index], obs)
            if verdict is not None:
                verdicts.append(verdict)
                stop = stop or verdict.action == "stop"
        if stop:
            return Evaluation(current, verdicts, obs.step, last_step)
    return Evaluation(current, verdicts, None, last_step)
