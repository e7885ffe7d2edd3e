"""The rule interface: a pure function of (parameters, state, observation, context) -> (state, verdict)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from plateau_tracker.server.policy._improvement import ImprovementTest
from plateau_tracker.server.policy._types import Context, Mode, Observation, Ties, Verdict

MAX_STEP = 2**62
"""The largest step a point may carry (ingest's bound): counts of steps, evaluations and runs in rule
parameters are bounded by it."""

MAX_RATIO = 1e9
"""The bound of dimensionless factors and of durations in seconds (31 years): every numeric parameter has
two ends, so every rule's work per point is bounded."""


DETAIL = "detail"
"""The evidence key of a stop's full sentence, where its reason is a headline (:meth:`Rule.stop`)."""


def keeping(step: int) -> str:
    """The headline's last clause: the step whose model to keep."""
    return f"keeping step {step}"


class RuleParams(BaseModel):
    """Parameters of one rule in a policy. Subclasses add ``rule: Literal[name]`` and their fields.

    ``ema``: judge an exponential moving average of the monitored metric (weight of the newest value,
    0 < ema <= 1) instead of the raw values. NaN/inf pass through unsmoothed and leave the average as is.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ema: float | None = Field(default=None, gt=0.0, le=1.0)


class ImprovementParams(RuleParams):
    """The improvement test's parameters, for the rules that take one (``patience``, ``checkpoint``): a
    value improves when it beats the best by more than ``min_delta`` (absolute, or relative to ``|best|``
    when ``relative``); ``ties="improve"`` also counts a gain of exactly ``min_delta``; steps below
    ``warmup`` are not judged and never set the best."""

    min_delta: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    relative: bool = False
    warmup: int = Field(default=0, ge=0, le=MAX_STEP, description="steps below this are not judged")
    ties: Ties = "wait"

    def improvement_test(self, mode: Mode) -> ImprovementTest:
        """The test these parameters describe, in ``mode``."""
        return ImprovementTest(mode, self.min_delta, self.relative, self.ties, from_step=self.warmup)


P = TypeVar("P", bound=RuleParams)
State = dict[str, Any]
# What own_copy copies (a tuple, not ``list | dict``: isinstance tests it faster, per key of every state).
_CONTAINERS = (list, dict)


class Rule(ABC, Generic[P]):
    """A convergence rule. Instances hold only validated parameters; all memory is in ``state``.

    ``state`` is a small JSON-serialisable dict, bounded in size whatever the run's length, so the tracker
    can store it in the same transaction as the points that moved it.

    ``guard`` rules (safety and budget limits, cross-run pruning) stop on their own even when the policy
    combines its convergence rules with ``all``.
    """

    name: ClassVar[str]
    guard: ClassVar[bool] = False
    stops: ClassVar[bool] = True
    # ``per_rank`` rules (distributed health: straggler, staleness) watch their own key on every rank, not
    # the monitored metric, and only raise alerts.
    per_rank: ClassVar[bool] = False
    # ``judges_late`` rules judge a point on its own (against their state, not the order of steps), so a
    # monitored point that arrives after later steps were judged is still judged by them (evaluate_late).
    judges_late: ClassVar[bool] = False
    # ``quiet_on_plain_points`` rules say nothing and leave their state as it is on a finite value that sets
    # no new best under their own test (checkpoint, non_finite): the engine does not call them there, which
    # on most points of a run is most points.
    quiet_on_plain_points: bool = False
    # ``asked_on_ties``: a quiet rule that is asked on a plain point all the same when its value equals the
    # best exactly (checkpoint, when it breaks ties by a loss): a tie moves no best, and most plain points
    # are no tie.
    asked_on_ties: bool = False

    def watch_key(self) -> str:
        """The key whose points drive this rule: the monitored metric, or a per-rank rule's own key."""
        return self.monitor

    def __init__(self, params: P, *, monitor: str, mode: Mode) -> None:
        self.params = params
        self.monitor = monitor
        self.mode = mode

    def improvement_test(self) -> ImprovementTest:
        """What moves the best so far this rule reads from ``ctx.best``: by default any finite value
        strictly better. Rules with a margin or a warm-up say so; rules with the same test share one best."""
        return ImprovementTest(self.mode)

    def required_keys(self) -> tuple[str, ...]:
        """Metric keys besides the monitored one this rule reads from ``Observation.extras``."""
        return ()

    def kept(self, state: State, stop: Verdict) -> Verdict:
        """``stop`` (any rule's) naming the model to keep as this rule, in ``state``, saved it: the
        ``checkpoint`` rule that breaks ties at the best by a loss names the tie it saved last. Others
        return ``stop`` unchanged."""
        return stop

    @abstractmethod
    def initial_state(self) -> State:
        """The state before the first observation."""

    @abstractmethod
    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        """Judge one observation; returns the state (changed in place) and a verdict or None.

        The engine hands each rule its own copy of its state once per evaluation (:meth:`own_copy`), so a
        rule changes it in place rather than copying it per observation. A rule that has said ``stop`` is
        not asked again: the engine keeps that flag, and the best so far (``ctx.best``)."""

    def own_copy(self, state: State) -> State:
        """A copy of ``state`` the rule may change in place: the dict and its lists and dicts are new
        (states hold scalars, and lists or dicts of scalars)."""
        return {
            key: value.copy() if isinstance(value, _CONTAINERS) else value for key, value in state.items()
        }

    def stop(
        self,
        obs: Observation,
        *,
        reason: str,
        evidence: dict[str, Any],
        best_step: int | None,
        best_value: float | None,
        headline: str | None = None,
    ) -> Verdict:
        """This rule's stop at ``obs``, naming the step whose model to keep.

        ``headline``: what happened, in plain words, for a rule whose full ``reason`` is a sentence of
        figures. The decision's reason is then the headline and the step to keep ("val/acc is still
        improving, but too slowly to matter before step 59; keeping step 14"), and the full sentence goes to
        the evidence as ``detail``, beside the figures it is written from."""
        if headline is not None:
            evidence = {**evidence, DETAIL: reason}
            reason = headline if best_step is None else f"{headline}; {keeping(best_step)}"
        return Verdict(
            action="stop",
            rule=self.name,
            step=obs.step,
            reason=reason,
            evidence=evidence,
            best_step=best_step,
            best_value=best_value,
        )
