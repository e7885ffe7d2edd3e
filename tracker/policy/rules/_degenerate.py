"""``degenerate``: stop a run whose metric keeps returning to exactly the same few values."""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

from pydantic import Field

from plateau_tracker.server.policy._base import MAX_STEP, Rule, RuleParams, State
from plateau_tracker.server.policy._keys import MetricNames, Names
from plateau_tracker.server.policy._percent import names_a_share, share_resolution
from plateau_tracker.server.policy._types import Context, Mode, Observation, Verdict, fmt
from plateau_tracker.server.policy.rules._loss_watch import (
    loss_names,
    loss_outlook,
    loss_said,
    loss_still_falls,
    observe_loss,
)
from plateau_tracker.server.policy.rules._window import (
    lr_held_at_peak,
    lr_seen,
    past_step_floors,
    warm_up_over,
)


class _SoFar(NamedTuple):
    """What a window is judged against: the run so far, at this observation."""

    best: float
    worst: float
    obs: Observation
    ctx: Context
    seen: int  # finite evaluations so far
    since_best: int  # evaluations since the best was set
    rate_held: bool  # a logged learning rate that has never fallen below its peak
    rate_seen: bool  # a learning rate has been logged
    first: float | None  # the run's first finite value (None in a state stored before it was kept)
    best_held: int  # evaluations in the upper part of the run's range since its best (kept in observe)


class DegenerateParams(RuleParams):
    """Stop when the last ``window`` finite values take at most ``max_distinct`` distinct values and the
    run is either *collapsed* or *stuck*.

    A model that predicts a constant (a collapsed classifier, a run stuck at initialisation) scores exactly
    the same accuracy, or one of a few class shares, at every evaluation. On a coarse metric (accuracy on a
    small validation set, in steps of 1/n) a learning run repeats values too, so few distinct values alone
    prove nothing. Both verdicts are therefore relative to the run's own range, never to the metric's units:

    - *collapsed*: the window's best value has fallen from the run's best by at least ``collapse_fraction``
      of the range the run has covered (best minus worst so far; at the default 0.5, into the worse half of
      it), and by more than twice the window's own spread: the run had learned, and has fallen back (to
      chance, typically).
    - *stuck*: the run's whole range is no wider than the window's own spread, and its best is older than
      the window: it has never moved beyond the values it repeats. A run that has not started learning
      looks exactly like that, so it is judged only past ``stuck_progress`` of its planned length (with
      no plan and ``stuck_progress`` above 0, after ``2 * window`` evaluations). While no learning rate
      has been logged, ``unscheduled_stuck_progress`` (when given; ``default`` sets 0.6, against 0.4 with
      a rate) takes its place: nothing then says whether the rate is constant or still warming up, and a
      run on a constant rate can lift off late (a breast-cancer run sat on its majority share for 52% of
      its plan, then reached 0.98).

    A plateau at a level the run climbed to (the window holds the run's best, well above where it started)
    is neither: that is for ``outlook``, ``forecast`` or ``patience`` to judge.

    ``fine_window`` (off unless given; ``default`` sets 4): on a *fine* metric, whose range so far spans at
    least ``fine_levels`` (1,000) of the steps it moves in (an accuracy over thousands of samples, or a
    loss), a collapse is judged over the last ``fine_window`` values instead of ``window``, when they
    repeat a value exactly and all lie worse than anything the run scored before them, by more than their
    own spread. A learning run on a coarse metric repeats values by chance, and so does a run wandering in
    a band of a hundred values of a fine one; a fall to a level the run never visited, repeating exactly
    there, is a constant prediction, and waiting a whole ``window`` for more of it only spends compute.
    The step is read from the values (an accuracy over n samples is a multiple of 1/n: see
    :func:`resolution`), never assumed, and what is read can only be coarser than the truth, so a coarse
    metric is never taken for a fine one. A *stuck* run, and a run that falls back to where it started
    (a run trained from scratch, back at chance), keep the long window.

    Nothing is judged before the warm-up is over: the learning rate (``lr_key``) has stopped rising (it
    fell, or repeated the last rate), the step is at least ``warmup``, and past ``min_progress`` of the
    planned length; many runs sit at chance until their learning rate has warmed up. A *stuck* run is
    also left alone while a logged rate has never fallen below its peak: a constant rate can still lift
    a run off where it started, late in its plan.

    ``loss_key`` (off by default; the ``default`` policy sets ``val_loss`` and its other spellings): no
    verdict while that logged validation loss's own outlook is not spent (its fall over the last doubling,
    carried to the planned end, exceeds ``loss_delta`` of its fall since its first value): a model sitting on
    one class share while its loss still falls is learning, and climbs off it later (held-out iris runs at 1/3
    for up to 44% of their plan).

    ``unscheduled_collapse_progress`` (off by default; the ``default`` policy sets 0.3): while no learning
    rate has been logged, a collapse seen over the long ``window`` (a coarse metric's) is judged only from
    that share of a declared plan. On a small validation set a run early in its plan can fall back to a
    class share for several evaluations and climb again, as its rate warms up or settles (a held-out wine
    run fell from 0.72 to 0.53 for six evaluations at 19% of its plan, then reached 0.97); with a rate
    logged the warm-up guard sees that. The fine window's collapse (a constant prediction on a fine metric)
    is not held.

    ``min_held`` (1 by default; the ``default`` policy sets 2): on a coarse metric, a collapse must fall
    from a level the run held: at least that many evaluations in the upper part of its range (within
    ``collapse_fraction`` of it from the best) since the best was set, the best included. After fewer, the
    best was a lucky evaluation, and the run is judged as *stuck* (so from ``stuck_progress`` of the plan).
    An iris run at 1/3 for 25 of its first 26 evaluations (0.4 at its 6th) was stopped as collapsed at its
    14th and reached 0.93 from its 27th; a wine run at 0.39 for ten evaluations with one 0.5 was stopped at
    its 14th of 30 and reached 0.86. A fine metric keeps the old reading: one evaluation well above chance
    there is a model that learned (MNLI runs that reach 0.6 once and then predict one class).

    ``fine_in_warmup`` (off by default; the ``default`` policy sets it): the fine window's collapse is judged
    while a logged learning rate still rises (``warmup`` and ``min_progress`` still hold it). A run that
    learned and then fell to a constant prediction on a fine metric, below anything it scored before
    (typically under a rate climbing to a peak too high for it), is not lifted back by a rate that still
    rises: of the 261 OPDA MNLI runs that fell from above 0.6 to a class share (below 0.37), one climbed
    back, and that one for a single evaluation. A coarse metric's collapse, and a *stuck* run, still wait
    for the rate to turn.

    ``collapse_to_start`` (off by default; the ``default`` policy sets 0.25): a collapse seen over the long
    ``window`` (a coarse metric's) must fall back towards where the run started: the window's best within
    that share of the run's range from its first value, or beyond it. A model that collapses (a constant
    prediction, weights blown up by a rate too high) loses what it learned and scores about as it did
    untrained, or worse; one that falls to a level well above its start still predicts, and on a small
    validation set it can stay there for a window and climb again. A digits run on 60 samples went from 0.1
    to 0.4 and back to 0.2 for ten evaluations, then climbed to 0.87 (watched alone, it would have been
    stopped as collapsed at its 26th of 80 evaluations). The fine window's collapse, a fall to a level the
    run never visited repeating exactly there, is judged as before."""

    rule: Literal["degenerate"] = "degenerate"
    window: int = Field(default=6, ge=3, le=100)
    max_distinct: int = Field(default=3, ge=1, le=100)
    warmup: int = Field(default=0, ge=0, le=MAX_STEP, description="steps below this are not judged")
    min_progress: float = Field(default=0.0, ge=0.0, le=1.0)
    stuck_progress: float = Field(
        default=0.0, ge=0.0, le=1.0, description="share of the plan a run that never moved must reach"
    )
    collapse_fraction: float = Field(default=0.5, gt=0.0, le=1.0)
    fine_window: int | None = Field(default=None, ge=3, le=100)
    fine_levels: float = Field(default=1000.0, ge=1.0, le=1e9, allow_inf_nan=False)
    lr_key: MetricNames | None = None
    loss_key: MetricNames | None = None
    loss_delta: float = Field(default=0.01, gt=0.0, le=1.0, allow_inf_nan=False)
    unscheduled_collapse_progress: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="share of the plan before which, with no rate, a coarse collapse waits",
    )
    unscheduled_stuck_progress: float | None = Field(
        default=None, ge=0.0, le=1.0, description="stuck_progress while no learning rate is logged"
    )
    min_held: int = Field(
        default=1, ge=1, le=100, description="evaluations near its best a coarse collapse must fall from"
    )
    fine_in_warmup: bool = Field(
        default=False, description="judge the fine window's collapse while the logged rate still rises"
    )
    collapse_to_start: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="share of its range from its first value a coarse collapse must fall back to",
    )


class Degenerate(Rule[DegenerateParams]):
    """NaN/inf are left to ``non_finite`` and not counted. Silent after it stops."""

    name = "degenerate"

    def __init__(self, params: DegenerateParams, *, monitor: str, mode: Mode) -> None:
        super().__init__(params, monitor=monitor, mode=mode)
        self._lr_names = Names.of(params.lr_key)
        self._loss_names = loss_names(params.loss_key, monitor, mode)
        # The values kept: the window, or one more than the fine window (the value that leaves it lowers
        # the floor).
        self._keep = max(params.window, params.fine_window + 1 if params.fine_window else 0)
        self._share = names_a_share(monitor, mode)  # a share in percent is read on a share's scale
        self._short_inside = params.fine_window is None or params.fine_window <= params.window

    def required_keys(self) -> tuple[str, ...]:
        return (*self._lr_names.order, *self._loss_names.order)

    def initial_state(self) -> State:
        return {
            "ys": [],
            "best_seen": 0,
            "worst": None,
            "floor": None,
            "seen": 0,
            "first": None,
        }

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        # In place (evaluate handed us our own copy), and cheap on the common path: this runs on every
        # monitored point of the default policy.
        p = self.params
        extras, value = obs.extras, obs.value
        if extras:
            logged_loss = self._loss_names.read(extras)
            if logged_loss is not None:
                observe_loss(state, obs.step, logged_loss)
        if not math.isfinite(value):
            return state, None
        lr = self._lr_names.read(extras) if extras else None
        state, warm = warm_up_over(state, obs, ctx, lr=lr, warmup=p.warmup, min_progress=p.min_progress)
        best, best_step = ctx.best.value, ctx.best.step
        worst = state.get("worst")
        if worst is None or (value < worst if self.mode == "max" else value > worst):
            worst = value
        seen = state.get("seen", 0) + 1
        if ctx.best.improved:
            state["best_seen"] = seen
        state["worst"], state["seen"] = worst, seen
        if seen == 1:
            state["first"] = value
        ys = state["ys"]
        ys.append(value)
        if p.min_held > 1 and best is not None:  # inline: it runs on every point
            # Evaluations in the upper part of the run's range (within collapse_fraction of it from the
            # best, the part a collapse falls out of) since the best: at a new best, it and the value just
            # before it if that lies there too (a climb that collapses right after its best held a level).
            line = p.collapse_fraction * abs(best - worst)
            if ctx.best.improved:
                state["held"] = 2 if len(ys) > 1 and abs(best - ys[-2]) < line else 1
            elif abs(best - value) < line:
                state["held"] = state.get("held", 0) + 1
        fine_window = p.fine_window
        if fine_window is not None:
            # ``floor``: the worst value older than the last fine_window, lowered by the value that just left
            # that window, if any: one comparison a point, no history kept. A state stored before ``floor``
            # existed starts from the run's worst so far, which can only make the test stricter.
            if "floor" not in state:
                state["floor"] = worst if seen > 1 else None
            if len(ys) > fine_window:
                leaving, floor = ys[-fine_window - 1], state["floor"]
                if floor is None or (floor > leaving if self.mode == "max" else floor < leaving):  # better()
                    state["floor"] = leaving
        if len(ys) > self._keep:
            del ys[: len(ys) - self._keep]
        # While the rate still warms up only the fine window's collapse may be judged, and only when asked.
        rising = (
            not warm
            and p.fine_in_warmup
            and past_step_floors(obs, ctx, warmup=p.warmup, min_progress=p.min_progress)
        )
        if not warm and not rising:
            return state, None
        assert best is not None  # this value is finite, so it set or kept a finite best
        since_best = seen - state.get("best_seen", 0)
        # A window that holds the run's best is neither collapsed (its best is the run's) nor stuck (a new
        # best inside it): most points of a learning run end here, before any window is built.
        if since_best < p.window and (p.fine_window is None or since_best < p.fine_window):
            return state, None
        window = ys[-p.window :]
        n_distinct = len(set(window))
        # Few distinct values in the long window, or a repeat in the short one: without either (most points
        # of a run on a fine metric) nothing here can stop it, and nothing more is built; a long window of
        # values all distinct holds no repeat in a shorter one. While the rate still rises the long window
        # is not judged at all.
        if n_distinct == len(window) and n_distinct > p.max_distinct and self._short_inside:
            return state, None
        short = ys[-p.fine_window :] if p.fine_window is not None else []
        repeats = (
            not rising and since_best >= p.window and len(window) == p.window and n_distinct <= p.max_distinct
        )
        if not repeats and not (since_best >= len(short) == p.fine_window and len(set(short)) < len(short)):
            return state, None
        held = bool(self._lr_names) and lr_held_at_peak(state)
        run = _SoFar(
            best,
            worst,
            obs,
            ctx,
            seen,
            since_best,
            held,
            lr_seen(state),
            state.get("first"),
            state.get("held", p.min_held),
        )
        kind, fine_step = None, None
        if repeats:
            kind = self._kind(window, run)
            if kind == "collapsed" and (self._collapse_waits(run) or self._short_of_start(window, run)):
                kind = None
        if kind is None and p.fine_window is not None and since_best >= p.fine_window:
            fine_step = self._fine_collapse(state, short, run)
            if fine_step is not None:
                kind, window = "collapsed", short
        if kind is None:
            return state, None
        loss = None
        if self._loss_names:
            planned = ctx.planned_steps or 2 * obs.step
            name = self._loss_names.read_name(obs.extras)
            loss = loss_outlook(state, name, obs.step, planned, p.loss_delta)
            if loss_still_falls(loss):
                return state, None  # learning, whatever the metric shows
        ys = window
        distinct = sorted(set(ys))
        fine = "" if fine_step is None else f"; {_resolution_said(fine_step)}, so exact repeats are no chance"
        if rising:
            fine += "; judged while the learning rate still rises, which does not lift a constant prediction"
        shown = ", ".join(fmt(v) for v in distinct)
        back = self._start_said(run, fine_step)
        why = (
            f"well below its best {fmt(best)} (step {best_step}){back}: the model has collapsed"
            if kind == "collapsed"
            else "and it has never moved beyond them: the model is not learning"
            if not self._lucky_best(ys, run)
            else (
                f"and it held its best {fmt(best)} (step {best_step}) for only {run.best_held} "
                f"evaluation(s) in the upper part of its range, fewer than {p.min_held}: on a metric this "
                "coarse that is a lucky evaluation, no level to collapse from, and the model is not learning"
            )
        )
        verdict = self.stop(
            obs,
            reason=(
                f"{self.monitor} has taken only {len(distinct)} distinct value(s) ({shown}) over its last "
                f"{len(ys)} evaluations, {why} (e.g. a constant prediction){fine}"
                + ("" if loss is None else f"; {loss_said(loss, p.loss_delta).removesuffix('; ')}")
            ),
            evidence={
                "kind": kind,
                "values": list(ys),
                "distinct": distinct,
                "window": len(ys),
                "max_distinct": p.max_distinct if fine_step is None else len(ys) - 1,
                "resolution": fine_step,
                "fine_levels": p.fine_levels if p.fine_window is not None else None,
                "best": best,
                "worst": worst,
                "collapse_fraction": p.collapse_fraction,
                "first": run.first,
                "collapse_to_start": p.collapse_to_start,
                "min_held": p.min_held,
                "held": run.best_held,
                "stuck_progress": self._stuck_share(lr_seen(state)),
                "planned_steps": ctx.planned_steps,
                "rate_rising": rising,
                **(loss or {}),
            },
            best_step=best_step,
            best_value=best,
            headline=(
                f"{self.monitor} has collapsed from its best to a few repeated values"
                if kind == "collapsed"
                else f"{self.monitor} is stuck on a few values: the model is not learning"
            ),
        )
        return state, verdict

    def _fine_collapse(self, state: State, short: list[float], run: _SoFar) -> float | None:
        """The metric's step (0: continuous) when the last ``fine_window`` values show a collapse on a fine
        metric, else None. They must repeat a value exactly, all lie worse than anything the run scored
        before them by more than their own spread (a fall to a level it never visited, not a dip back into
        its own range: on a fine metric a run wandering inside a band of a hundred values repeats one by
        chance), be a collapse by the long window's test, and the metric must be fine."""
        if len(short) < (self.params.fine_window or 0) or len(set(short)) == len(short):
            return None
        before = state.get("floor")
        if before is None:  # the window holds the run's first value
            return None
        spread = max(short) - min(short)
        top = max(short) if self.mode == "max" else min(short)
        fall = before - top if self.mode == "max" else top - before  # how far below the floor the window lies
        if fall <= spread:
            return None
        if self._kind(short, run) != "collapsed":
            return None
        return self._fine(short, run.best, run.worst)

    def _fine(self, values: list[float], best: float, worst: float) -> float | None:
        """The metric's step when the run's range so far spans at least ``fine_levels`` of it (0 for a
        continuous metric), else None: a coarse metric."""
        step = share_resolution([*values, best, worst], self._share)
        return step if abs(best - worst) >= self.params.fine_levels * step else None

    def _kind(self, ys: list[float], run: _SoFar) -> str | None:
        """``collapsed``, ``stuck`` or None (a plateau the run climbed to, a run still setting new bests,
        or too early to tell)."""
        p = self.params
        best, worst, obs, ctx, seen, since_best, rate_held, rate_seen, first, _ = run
        covered = abs(best - worst)
        spread = max(ys) - min(ys)
        top = max(ys) if self.mode == "max" else min(ys)
        if covered > spread:
            # Fallen well below the best, by more than twice the window's own spread: on a coarse metric a
            # dip of a step or two is noise, not a collapse.
            below_best = abs(best - top)
            if below_best >= p.collapse_fraction * covered and below_best > 2 * spread:
                if not self._lucky_best(ys, run):
                    return "collapsed"
                # A best scored once on a coarse metric, nothing since near it: no level to collapse from,
                # so judged as stuck (below).
            # Not fallen from a best it climbed to: a run whose best is no further from its first value than
            # the window's spread has never moved beyond where it started, though its range holds a value
            # this window lacks (at chance on 2,000 samples: 0.2510 first, 0.2485 once); judged as stuck.
            elif first is None or abs(best - first) > spread:
                return None
        if since_best < p.window:  # a new best inside the window: still moving, however coarsely
            return None
        if rate_held:  # a rate still at its peak can still lift a run off where it started
            return None
        share = self._stuck_share(rate_seen)
        if share == 0.0:
            return "stuck"
        if ctx.planned_steps is None:
            return "stuck" if seen >= 2 * p.window else None
        return "stuck" if obs.step >= share * ctx.planned_steps else None

    def _lucky_best(self, ys: list[float], run: _SoFar) -> bool:
        """Whether a collapse seen on a coarse metric falls from a best the run never held: fewer than
        ``min_held`` evaluations in the upper part of its range since that best was set (it included). A
        run at chance on a small validation set can score one lucky evaluation far above the rest (iris at 1/3
        for 25 of its first 26 evaluations, 0.4 at its 6th; wine at 0.39 with one 0.5), and a fall back from
        it is no collapse. On a fine metric one evaluation well above chance is a model that learned (MNLI
        runs that reach 0.6 once and then predict one class)."""
        if run.best_held >= self.params.min_held:
            return False
        return self._fine(ys, run.best, run.worst) is None

    def _start_said(self, run: _SoFar, fine_step: float | None) -> str:
        """The collapse's fall back towards the run's start, in words, when ``collapse_to_start`` judged it
        (a collapse over the long window); else nothing."""
        share = self.params.collapse_to_start
        if share is None or run.first is None or fine_step is not None:
            return ""
        return f", back to within {share:g} of its range from its first value {fmt(run.first)}"

    def _short_of_start(self, ys: list[float], run: _SoFar) -> bool:
        """Whether a collapse seen over the long window stays short of where the run started: the best of
        ``ys`` lies more than ``collapse_to_start`` of the run's range above its first value (off when
        None). A model that collapses (a constant prediction, weights blown up by a rate too high) loses what
        it learned and scores about as it did untrained; one that dips to a level well above its start still
        predicts, and on a small validation set such a dip can last a window and climb again (a digits run
        at 0.1, up to 0.4, back at 0.2 for ten evaluations, then 0.87 by the end of its plan)."""
        share, first = self.params.collapse_to_start, run.first
        if share is None or first is None:
            return False
        top = max(ys) if self.mode == "max" else min(ys)
        above_start = top - first if self.mode == "max" else first - top
        return above_start > share * abs(run.best - run.worst)

    def _collapse_waits(self, run: _SoFar) -> bool:
        """Whether a collapse seen over the long window (a coarse metric's) is too early to judge: no
        learning rate logged, and before ``unscheduled_collapse_progress`` of a declared plan."""
        share, planned = self.params.unscheduled_collapse_progress, run.ctx.planned_steps
        return (
            share is not None and planned is not None and not run.rate_seen and run.obs.step < share * planned
        )

    def _stuck_share(self, rate_seen: bool) -> float:
        """The share of the plan a *stuck* run must reach: ``unscheduled_stuck_progress`` while no learning
        rate has been logged (when given), else ``stuck_progress``."""
        p = self.params
        if not rate_seen and p.unscheduled_stuck_progress is not None:
            return p.unscheduled_stuck_progress
        return p.stuck_progress


def _resolution_said(step: float) -> str:
    """The metric's resolution in words. A step of 0 is one too fine to read: a continuous metric, or an
    accuracy over thousands of samples stored as float32 (MNLI's), which is not continuous."""
    if step:
        return f"the metric moves in steps of {step:.3g} or finer"
    return "the metric's values show no step (it is continuous, or finer than they can tell)"
