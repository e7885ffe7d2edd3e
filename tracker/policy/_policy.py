"""A run's policy and the pure evaluation of it over new observations."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from plateau_tracker._mode import infer_mode
from plateau_tracker.server.policy._base import Rule, State
from plateau_tracker.server.policy._improvement import Best, ImprovementTest
from plateau_tracker.server.policy._registry import RuleSpec, build_rule
from plateau_tracker.server.policy._types import Context, Mode, Observation, Verdict

_RULE_ADAPTER: TypeAdapter[RuleSpec] = TypeAdapter(RuleSpec)


def default_rules() -> list[RuleSpec]:
    """Plateau's default single-run rules (``plateau_tracker.server.policy.presets.DEFAULT_RULES``)."""
    from plateau_tracker.server.policy.presets import DEFAULT_RULES  # presets build on this module

    return [_RULE_ADAPTER.validate_python(rule) for rule in DEFAULT_RULES]


class PolicySpec(BaseModel):
    """What to watch and how to judge it: ``{monitor, mode, rules, combine}``.

    ``monitor`` is the metric key judged: rank 0's value, or with ``reduce`` the mean/min/max over ranks,
    judged once every rank has reported the step (or ``reduce_timeout_s`` after its first report, stated in
    the decision). Rules run in order on each new step of it; per-rank rules (distributed health) watch
    their own keys.
    ``combine``: ``any`` stops as soon as one rule says stop; ``all`` stops once every convergence rule has
    said so (each rule's stop is a vote that stands), while guard rules (non_finite, divergence,
    threshold, perfect, budget, percentile, asha) still stop on their own.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    monitor: str = Field(min_length=1, max_length=250)
    mode: Mode = Field(
        default="min",
        description='min or max; "auto" or left out: read from the monitor\'s name '
        "(val/acc: max, val_loss: min), else min",
    )
    rules: list[RuleSpec] = Field(default_factory=default_rules, max_length=32)
    combine: Literal["any", "all"] = "any"
    reduce: Literal["rank0", "mean", "min", "max"] = Field(
        default="rank0",
        description="judge rank 0's value, or a reduction over ranks once every rank has reported the step",
    )
    reduce_timeout_s: float = Field(
        default=60.0, gt=0.0, allow_inf_nan=False, description="judge with the ranks present after this long"
    )

    @model_validator(mode="before")
    @classmethod
    def _mode_from_the_name(cls, data: Any) -> Any:
        """``mode`` left out or ``"auto"``: the direction the monitor's name says
        (``plateau_tracker._mode.infer_mode``: ``val/acc`` is maximised, ``val_loss`` minimised), else
        ``min``. A client that leaves it out for an accuracy would otherwise have it judged as a loss: its
        first value the best, every rise a fall."""
        if isinstance(data, dict) and data.get("mode", "auto") == "auto":
            monitor = data.get("monitor")
            return {**data, "mode": (infer_mode(monitor) if isinstance(monitor, str) else None) or "min"}
        return data

    @model_validator(mode="after")
    def _rules_fit_the_mode(self) -> PolicySpec:
        for params in self.rules:
            if params.rule == "prechelt" and self.mode != "min":
                raise ValueError(
                    "rule prechelt needs a validation loss or error to minimise (mode min); "
                    f"got mode {self.mode!r} for {self.monitor!r}: monitor a loss or 1 - accuracy instead"
                )
        return self

    def required_keys(self) -> set[str]:
        """Metric keys besides ``monitor`` that the rules read."""
        return {key for rule in self.build() if not rule.per_rank for key in rule.required_keys()}

    def companion_keys(self) -> tuple[str, ...]:
        """:meth:`required_keys` in a fixed order, built once per spec (ingest asks on every batch)."""
        return self._companions

    @cached_property
    def _companions(self) -> tuple[str, ...]:
        return tuple(sorted(self.required_keys()))

    def companion_key_set(self) -> frozenset[str]:
        """:meth:`required_keys` as a set built once per spec, for membership tests on the ingest path."""
        return self._companion_set

    @cached_property
    def _companion_set(self) -> frozenset[str]:
        return frozenset(self._companions)

    def per_rank_keys(self) -> set[str]:
        """Keys watched by per-rank rules (distributed health, on every rank)."""
        return {rule.watch_key() for rule in self.build() if rule.per_rank}

    def judged_keys(self) -> frozenset[str]:
        """The keys whose new points the rules judge: the monitored one and the per-rank rules' (a batch
        bringing none of them only stores points); built once per spec."""
        return self._judged_keys

    @cached_property
    def _judged_keys(self) -> frozenset[str]:
        return frozenset({self.monitor, *self.per_rank_keys()})

    def build(self) -> list[Rule[Any]]:
        """The rule objects, built once per spec: rules hold only parameters, so they can be shared."""
        return self._compiled

    @cached_property
    def _compiled(self) -> list[Rule[Any]]:
        return [build_rule(p, monitor=self.monitor, mode=self.mode) for p in self.rules]

    def best_keys(self) -> list[tuple[float | None, ImprovementTest] | None]:
        """Per rule, what its best so far is kept under: its smoothing and improvement test (rules with
        both alike share one best), None for a per-rank rule; built once per spec."""
        return self._best_keys

    @cached_property
    def _best_keys(self) -> list[tuple[float | None, ImprovementTest] | None]:
        return [
            None if rule.per_rank else (rule.params.ema, rule.improvement_test()) for rule in self.build()
        ]


@dataclass(frozen=True)
class Evaluation:
    """The outcome of judging a run's new observations."""

    states: list[State]
    verdicts: list[Verdict]
    stop_step: int | None
    last_step: int | None


def initial_states(policy: PolicySpec) -> list[State]:
    return [
        {"s": rule.initial_state(), "ema": None, "vote": None, "stopped": False} for rule in policy.build()
    ]


def _smoothed(
    alpha: float | None, previous: float | None, obs: Observation
) -> tuple[Observation, float | None]:
    if alpha is None or not math.isfinite(obs.value):
        return obs, previous
    value = obs.value if previous is None else alpha * obs.value + (1 - alpha) * previous
    return Observation(obs.step, value, obs.wall_time, obs.extras, obs.rank, obs.stale), value


def evaluate_per_rank(
    policy: PolicySpec, states: Sequence[State], observations: dict[str, list[Observation]]
) -> tuple[list[State], list[Verdict]]:
    """Run the per-rank rules (distributed health) over the new points of their keys (every rank, in step
    then rank order).

    Pure, like :func:`evaluate`; other rules' states are returned unchanged.
    """
    rules = policy.build()
    current: list[dict[str, Any]] = [dict(s) for s in states]  # other rules' states pass through unchanged
    verdicts: list[Verdict] = []
    for wrapper, rule in zip(current, rules, strict=True):
        if not rule.per_rank:
            continue
        wrapper["s"] = rule.own_copy(wrapper["s"])  # this call's own copy, changed in place
        for obs in sorted(observations.get(rule.watch_key(), []), key=lambda o: (o.step, o.rank)):
            wrapper["s"], verdict = rule.observe(wrapper["s"], obs, Context())
            if verdict is not None:
                verdicts.append(verdict)
    return current, verdicts


evaluate_health = evaluate_per_rank
"""Deprecated name of :func:`evaluate_per_rank` ("health" also means the server's and the run's)."""


def _failed(rule: Rule[Any], wrapper: dict[str, Any], step: int, exc: Exception) -> Verdict | None:
    """A rule that raised on a point. Every rule is meant to be total (tests/test_rule_totality.py), but a
    rule that raised once used to fail its run's every later batch, so no stop was ever decided. Instead
    the rule skips the point (an in-place rule may keep part of it), the other rules and later points go
    on, and an alert says so, once per run (the wrapper remembers the first step that failed)."""
    if wrapper.get("failed") is not None:
        return None
    wrapper["failed"] = step
    return Verdict(
        action="alert",
        rule=rule.name,
        step=step,
        reason=(
            f"rule {rule.name} could not judge {rule.monitor} at step {step} ({type(exc).__name__}: {exc}); "
            "it skips the points it cannot judge, and the other rules go on"
        ),
        evidence={"error": type(exc).__name__, "message": str(exc)[:200]},
    )


def _combined(rules: list[Rule[Any]], states: list[State], step: int) -> Verdict | None:
    voters = [i for i, rule in enumerate(rules) if rule.stops and not rule.guard and not rule.per_rank]
    if not voters or any(states[i]["vote"] is None for i in voters):
        return None
    votes = [states[i]["vote"] for i in voters]
    last = max(votes, key=lambda v: v["step"])
    return Verdict(
        action="stop",
        rule="all",
        step=step,
        reason="every convergence rule agrees: " + "; ".join(f"{v['rule']}: {v['reason']}" for v in votes),
        evidence={"votes": votes},
        best_step=last["best_step"],
        best_value=last["best_value"],
    )


def _bests(policy: PolicySpec, wrappers: Sequence[State]) -> list[Best | None]:
    """Each rule's best so far (None for per-rank rules), restored from the stored wrappers: one
    :class:`Best` per improvement test and smoothing, shared by the rules that have both alike."""
    shared: dict[tuple[Any, ...], Best] = {}
    bests: list[Best | None] = []
    for key, wrapper in zip(policy.best_keys(), wrappers, strict=True):
        if key is None:
            bests.append(None)
            continue
        best = shared.get(key)
        if best is None:
            best = shared[key] = Best(key[1])
        best.restore(wrapper)
        bests.append(best)
    return bests


def _store_bests(wrappers: list[dict[str, Any]], bests: list[Best | None]) -> None:
    for wrapper, best in zip(wrappers, bests, strict=True):
        if best is not None:
            wrapper["best"] = best.stored()


def _has_stopped(wrapper: State) -> bool:
    """Whether the rule has said stop; a state stored before the engine kept this flag says so inside the
    rule's own state."""
    return bool(wrapper["stopped"] if "stopped" in wrapper else wrapper["s"].get("stopped"))


def _own_copies(rules: list[Rule[Any]], states: Sequence[State]) -> list[dict[str, Any]]:
    """This call's own copies of the wrappers and of the rules' states, which the rules then change in
    place: one copy per rule and call, not one per observation."""
    return [
        {**wrapper, "s": rule.own_copy(wrapper["s"]), "stopped": _has_stopped(wrapper)}
        for wrapper, rule in zip(states, rules, strict=True)
    ]


class _Judge(NamedTuple):
    """What the judging loop needs of a rule that judges the monitored metric, looked up once per call
    rather than per observation (that loop is the engine's hot path)."""

    wrapper: dict[str, Any]
    rule: Rule[Any]
    observe: Any  # the rule's bound observe
    alpha: float | None  # its smoothing
    stops_alone: bool
    best: Best
    ctx: Context  # its context, carrying its best


def _judged(
    policy: PolicySpec,
    rules: list[Rule[Any]],
    current: list[dict[str, Any]],
    bests: list[Best | None],
    ctx: Context,
) -> list[_Judge]:
    """A :class:`_Judge` for each rule that judges the monitored metric, in the rules' order."""
    contexts = {
        id(best): replace(ctx, best=best) for best in {id(b): b for b in bests if b is not None}.values()
    }
    alone = policy.combine == "any"
    return _still_judging(
        [
            _Judge(
                wrapper, rule, rule.observe, rule.params.ema, rule.guard or alone, best, contexts[id(best)]
            )
            for wrapper, rule, best in zip(current, rules, bests, strict=True)
            if best is not None
        ]
    )


def _still_judging(judges: list[_Judge]) -> list[_Judge]:
    """Without the rules that have said stop (alone or as a vote): they have nothing more to say. A
    smoothed one stays, to keep its average."""
    return [judge for judge in judges if not (judge.wrapper["stopped"] and judge.alpha is None)]


def _quiet(judges: list[_Judge], *, tie: bool = False) -> list[_Judge]:
    """The judges asked on a plain point (a finite value that moves no raw best): all but the unsmoothed
    rules that are quiet there (``quiet_on_plain_points``), in the same order; with ``tie`` (the value
    equals a best), also those asked on ties (``asked_on_ties``)."""
    return [
        judge
        for judge in judges
        if not (
            judge.rule.quiet_on_plain_points
            and judge.alpha is None
            and not (tie and judge.rule.asked_on_ties)
        )
    ]


def _kept(rules: list[Rule[Any]], current: list[dict[str, Any]], stop: Verdict) -> Verdict:
    """``stop`` naming the model the policy's checkpoints kept (:meth:`Rule.kept`): once per stop."""
    for rule, wrapper in zip(rules, current, strict=True):
        stop = rule.kept(wrapper["s"], stop)
    return stop


def _vote(verdict: Verdict) -> dict[str, Any]:
    """A convergence rule's stop under ``combine: all``, as its wrapper keeps it until every rule agrees."""
    return {
        "rule": verdict.rule,
        "step": verdict.step,
        "reason": verdict.reason,
        "best_step": verdict.best_step,
        "best_value": verdict.best_value,
    }


def evaluate(
    policy: PolicySpec,
    states: Sequence[State],
    observations: Iterable[Observation],
    ctx: Context | None = None,
) -> Evaluation:
    """Run every rule over ``observations`` (in step order) from ``states``; stop at the first stop.

    Pure: no I/O, no clock. ``states`` must be one per rule, as returned by a previous evaluation or by
    :func:`initial_states`. ``ctx`` carries the run's planned length and its cohort for cross-run rules;
    each rule's context also carries its best so far, which the engine moves once per observation.

    A planned length holds up to its own step: from the first observation past it, the rules judge the
    run as one with no plan. A run that has passed its planned end is either going on longer than
    planned or was given its plan in another unit than its steps (epochs against batches), and either
    way the plan no longer says how much of the run is left; read as it stands, it would say "none",
    and the rules that carry a run's pace to its planned end would stop a run that still climbs.
    """
    rules = policy.build()
    if len(states) != len(rules):
        raise ValueError(f"expected {len(rules)} rule states, got {len(states)}")
    current = _own_copies(rules, states)  # this call's own copies: changed in place below
    bests = _bests(policy, current)
    ctx = ctx or Context()
    judged = _judged(policy, rules, current, bests, ctx)
    plan = ctx.planned_steps
    # The bests of raw values move once per observation, before the rules judge it; a smoothed rule's best
    # moves when the first rule of its test and smoothing has smoothed the value.
    raw_bests = list({id(judge.best): judge.best for judge in judged if judge.alpha is None}.values())
    quiet, tied = _quiet(judged), _quiet(judged, tie=True)
    verdicts: list[Verdict] = []
    last_step: int | None = None
    stop_step: int | None = None
    combine_all = policy.combine == "all"
    for obs in sorted(observations, key=lambda o: o.step):
        last_step = obs.step
        if plan is not None and last_step > plan:  # once per call at most: the steps come in order
            judged, plan = _judged(policy, rules, current, bests, replace(ctx, planned_steps=None)), None
            quiet, tied = _quiet(judged), _quiet(judged, tie=True)
        plain = True  # a finite value that moves no raw best: the quiet rules are not asked
        tie = False  # ... unless it equals a best, for the rules asked on ties
        for raw in raw_bests:
            raw.see(obs.value, last_step)
            if raw.improved:
                plain = False
            elif obs.value == raw.value:
                tie = True
        voted = False
        for wrapper, rule, observe, alpha, stops_alone, best, rule_ctx in (
            (tied if tie else quiet) if plain and math.isfinite(obs.value) else judged
        ):
            seen = obs
            if alpha is not None:
                seen, wrapper["ema"] = _smoothed(alpha, wrapper["ema"], obs)
                if best.seen is not obs:
                    best.see(seen.value, seen.step)
                    best.seen = obs
                if wrapper["stopped"]:  # said stop (a vote), kept in judged only for its average
                    continue
            try:
                wrapper["s"], verdict = observe(wrapper["s"], seen, rule_ctx)
            except Exception as exc:
                failed = _failed(rule, wrapper, obs.step, exc)
                if failed is not None:
                    verdicts.append(failed)
                continue
            if verdict is None:
                continue
            if verdict.action != "stop":
                verdicts.append(verdict)
                continue
            wrapper["stopped"] = True
            if stops_alone:
                verdicts.append(_kept(rules, current, verdict))
                stop_step = obs.step
            elif wrapper["vote"] is None:
                wrapper["vote"] = _vote(verdict)
                voted = True
        if stop_step is None and combine_all:
            combined = _combined(rules, current, obs.step)
            if combined is not None:
                verdicts.append(_kept(rules, current, combined))
                stop_step = obs.step
        if stop_step is not None:
            break
        if voted:  # a vote is a stop that stands: its rule judges no later point
            judged = _still_judging(judged)
            quiet, tied = _quiet(judged), _quiet(judged, tie=True)
    _store_bests(current, bests)
    return Evaluation(current, verdicts, stop_step, last_step)


def evaluate_late(
    policy: PolicySpec,
    states: Sequence[State],
    observations: Iterable[Observation],
    *,
    judged_step: int,
    ctx: Context | None = None,
) -> Verdict | None:
    """Judge monitored points that arrived after a later step had been judged (a trainer's batches can
    arrive out of order); the first stop found, in step order, or None.

    The order-dependent rules (patience, trends, forecasts) have moved past these steps and cannot take
    them back; the rules that judge a point on its own (``judges_late``: ``non_finite``, ``threshold``,
    ``divergence``) do, each on a throwaway copy of its state, so a late NaN still stops the run. Pure.
    """
    ctx = ctx or Context()
    rules = policy.build()
    bests = _bests(policy, states)
    for obs in sorted(observations, key=lambda o: o.step):
        for wrapper, rule, stored_best in zip(states, rules, bests, strict=True):
            if not rule.judges_late or stored_best is None or _has_stopped(wrapper):
                continue
            state = rule.own_copy(wrapper["s"])  # judged on its own: a throwaway copy
            best = stored_best.copy()  # judged on its own: the stored best moves for this point alone
            best.see(obs.value, obs.step)
            try:
                _, verdict = rule.observe(state, obs, replace(ctx, best=best))
            except Exception:  # a late point is judged by what can judge it; never fails the batch
                continue
            if verdict is not None and verdict.action == "stop":
                return replace(
                    verdict,
                    reason=f"{verdict.reason} (a late point: it arrived after step {judged_step} was judged)",
                    evidence={**verdict.evidence, "late": True, "judged_step": judged_step},
                )
    return None
