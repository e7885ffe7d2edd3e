"""``outlook``: stop when the pace of the best value, carried to the planned end, adds too little."""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple

from pydantic import Field, model_validator

from plateau_tracker.server.policy._base import MAX_STEP, Rule, RuleParams, State
from plateau_tracker.server.policy._keys import MetricNames, Names
from plateau_tracker.server.policy._percent import in_percent, names_a_share, share_resolution
from plateau_tracker.server.policy._resolution import step_between
from plateau_tracker.server.policy._stats import noise_sigma, ols, step_noise
from plateau_tracker.server.policy._types import BestSoFar, Context, Mode, Observation, Verdict, fmt
from plateau_tracker.server.policy.rules._loss_watch import (
    TURNED_UP,
    best_at_half_after,
    keep_best,
    loss_names,
    loss_outlook,
    loss_said,
    loss_seen,
    loss_still_falls,
    observe_loss,
    train_loss_names,
)
from plateau_tracker.server.policy.rules._perfect import perfect_score
from plateau_tracker.server.policy.rules._window import lr_seen

_NOISE_WINDOW = 8
# A retreat overrides a validation loss that still falls only when it spans at least this many of the
# metric's steps (its resolution: 1/n for an accuracy over n samples), besides being steady: on a small
# validation set a steady dip of a few samples climbs back.
STEADY_STEPS = 10
# The alert a blind run gets once, at its first evaluation past min_progress of its plan that the later floor
# holds back: on the team's corpus the default saves markedly more on runs that log their
# rate and validation loss than on the same runs watched alone, and only the trainer can log them.
BLIND_ALERT = "blind"


class _Tier(NamedTuple):
    """A blind run's headroom and the tier it earned: within ``share`` of its progress from the metric's
    perfect score, so judged from ``floor`` of its plan."""

    room: float
    share: float
    floor: float


class OutlookParams(RuleParams):
    """Stop when even the best value's own recent pace, kept up to the planned end, cannot add
    ``relative_delta`` of the progress the run has made so far.

    At step ``t`` the best so far is compared with the best at step ``t / 2``: the gain over the last
    doubling of the run. Learning curves gain less and less per step (power laws, exponentials); the most
    they keep is a constant gain per *doubling* of the steps (a logarithmic curve), so by the planned end
    ``T`` the best can still gain about ``gain over the last doubling x log2(T / t)``. The rule stops when
    that is at most ``relative_delta x (best - first value)``: scale-free in the metric (a share of the
    run's own progress, the same bar for accuracy, cross-entropy or perplexity) and in time (doublings,
    whatever the unit of a step). With no plan the run is taken to last as long again (one doubling).

    Guards, all of which must pass: at least ``min_evaluations`` evaluations and ``min_progress`` of the
    plan; the run has learned: its progress exceeds ``learned_noise`` times its own noise (a robust
    estimate from the last evaluations' differences) and ``learned_spread`` times the spread of its last
    8 values (a run at chance jitters about as far as it has "progressed"; it is left to
    ``degenerate``); and with a learning rate (``lr_key``), the rate is not warming up, and once it has
    started to decay it is down to ``lr_fraction`` of its peak (decaying schedules lift plateaus late; a
    rate still flat at its peak, a constant schedule so far, holds nothing back, and no rate holds back a
    metric that has taken exactly one value at each of its last 8 evaluations).

    ``noise_discount``: the pace counts only beyond that many times the run's step-to-step noise (the
    detrended spread of the last evaluations' differences): on a coarse metric a lucky step up is not
    progress.

    ``resolution_share`` (0 by default; the ``default`` policy sets 0.1): the pace also counts that share of
    the metric's step (read from its values, whatever their offset and scale: an accuracy over n samples
    moves in steps of 1/n, in percent 100/n, see :func:`~tracker.policy._resolution.step_between`; a loss
    reads as continuous, step 0). A model can gain on
    the best by less than a step without one more sample of a small validation set changing its answer, so a
    best that stood still over a doubling on a coarse metric says less than one that stood still on a fine
    one: on 30 samples a run needs about 10 steps of progress before 1% of it can be told from a step it could
    not show. Iris runs sat on 0.667 for 45 evaluations, and breast-cancer runs on their majority share for
    half their plan, while a held-out split still climbed.

    ``rising_t`` (off by default; the ``default`` policy sets 2): never stop a run whose last 8 values
    rise, by a least-squares slope over their steps at least ``rising_t`` standard errors above zero, at
    a pace that would carry them past the best by more than ``relative_delta`` of the progress by the
    planned end. The best can stand still for a whole doubling while the values climb back towards it:
    ImageNet runs that peak early at a high learning rate, fall, and climb again as it anneals. A rise
    that noise could make (under ``rising_t`` standard errors) holds nothing back.

    ``loss_key`` (off by default; the ``default`` policy sets ``val_loss`` and its other spellings): a
    validation loss logged beside the watched metric. While its own outlook is not spent (its fall over the
    last doubling, carried to the planned end, exceeds ``relative_delta`` of its fall since its first value),
    neither the outlook nor ``retreat`` stops the run. A coarse accuracy can sit on one value for many
    evaluations while the model still learns (iris's 0.667, two classes of three told apart, for a third of a
    run before the third class separates); the loss sees it, and a loss that has turned up (overfitting) holds
    nothing back, nor does one that has fallen by at most 0.5% of its first value (not learning). Nor does it
    hold a ``retreat`` that moves away from the best steadily (by ``early_retreat_t`` standard errors of its
    slope) and by at least 10 of the metric's own steps: an accuracy on a large set falling while its loss
    still falls. A run that never logs it is judged on the watched metric alone.

    ``train_key`` (off by default; the ``default`` policy sets ``train_loss`` and its other spellings): a
    training loss logged beside the watched metric. Once it has fallen by at least ``overfit_share`` of its
    whole fall (since its first value) after the watched metric set its best, the run fits its training data
    without gaining on validation: overfitting (Prechelt's generalisation loss). A learning-rate schedule
    still to come slows that but does not turn it back, so the learning-rate guard no longer holds the run
    (runs that peak during a long warm-up and overfit from there waited for the rate to fall to
    ``lr_fraction`` of its peak). Not while a validation loss (``loss_key``) has set a new low since that
    best: the model still generalises better, and the watched metric's best may be a lucky value on a small
    validation set. A run that never logs a training loss keeps the guard.

    ``early_retreat_t`` (off by default; the ``default`` policy sets 5): ``retreat`` may stop a run before
    ``min_progress`` of its plan when its last 8 values move away from the best by at least that many
    standard errors of their slope: a loss that turns up steadily after its best (boosted trees overfit
    within the first tenth of their rounds) is not a flat start, and waiting for the floor only spends
    compute. The learning-rate guard still applies.

    ``blind_min_progress`` and ``blind_early_retreat_t`` (off by default; the ``default`` policy sets 0.8
    and 15): a run with a declared plan that has logged neither a learning rate (``lr_key``) nor a
    validation loss (``loss_key``) is *blind*: nothing says whether its schedule is still to anneal, nor
    whether the model still learns under a metric that stands still. Schedules that decay (step, cosine,
    triangular, one-cycle) make their largest gains late: ImageNet runs at a high rate peak early, fall for
    half their plan and climb to several times that best as the rate anneals, and with neither series the
    outlook and the retreat read that fall as a run that has left its best behind. So a blind run is not
    judged before ``blind_min_progress`` of its plan, except by a retreat whose last 8 values move away
    from the best by at least ``blind_early_retreat_t`` standard errors of their slope (a loss that
    overfits turns up more steadily than a run at a rate too high falls). Logging the rate or a validation
    loss lifts both. ``blind_headroom`` (off by default; the ``default`` policy sets 0.2):
    nor is a blind run held back whose best is within that share of its progress from the metric's perfect
    score (1 for a share, 0 for a non-negative metric in mode min, read from its values): no schedule can add
    more than what is left, so it is judged from ``min_progress`` as the others. ``blind_mid_headroom`` and
    ``blind_mid_progress`` (off by default; the ``default`` policy sets 0.7 and 0.65): a middle tier, a
    blind run whose best is within ``blind_mid_headroom`` of its progress from that perfect score (it has
    covered at least 1/1.7, 59%, of the way from its first value to it) is judged from
    ``blind_mid_progress`` of its plan instead of ``blind_min_progress``: the less of its range a run has
    left, the less a schedule it cannot see can still lift it, and the runs that climb late from a long
    plateau (ImageNet at a few percent while a one-cycle rate is high) sit far below their perfect score.

    ``unplanned_evaluations`` (off by default; the ``default`` policy sets 16, as ``degenerate`` waits
    twice its window of 8 for a stuck run with no plan): with no planned end declared, ``min_progress``
    cannot hold (the run is taken to last as long again, so it is always half-way), and nothing is
    judged before this many evaluations.

    ``final_share`` (off by default; the ``default`` policy sets 0.1): in the last ``final_share`` of a
    declared plan, an evaluation that sets a new best is not a spent outlook. Near the end the doublings
    left shrink to nothing, so the pace test passes for any run, even one that still gains at every
    evaluation; stopping it there saves at most that share of the run and gives up the gains it is still
    making, where patience-k (which never stops at a new best) lets it finish. The next evaluation that
    sets no new best is judged as before.

    ``steady_retreat_t`` (off by default; the ``default`` policy sets 5): a ``retreat`` whose last 8 values
    move away from the best by at least that many standard errors of their slope, the latest of them worse
    than the first and the worst of the last ``retreat_window``, asks for no share of the progress, only
    the noise bar (each of the last ``retreat_window`` values short of the best by more than
    ``retreat_noise`` times the step-to-step noise):
    a steady move away from the best is no lucky dip, whatever its size against the run's progress (a loss
    that climbs slowly from its low while the run's early fall dwarfs it). Before the plan's floor the early
    retreat asks for it the same way.

    ``unimproved_share`` (off by default; the ``default`` policy sets 0.05): a run whose best is still its
    first value has made no progress, so neither the pace nor ``retreat`` (both shares of the progress) can
    judge it; it is stopped when each of its last ``retreat_window`` values is worse than that first value
    by more than ``unimproved_share`` of its size and ``retreat_noise`` times the step-to-step noise, under
    the plan's floor, the learning-rate guard (which ``train_key``'s overfitting test does not lift here: a
    training loss that fell since a best at the first evaluation is a run recovering from a rate too high,
    not one that overfits) and the holds of a validation loss that still falls and of values that rise
    towards it (``rising_t``). A run that scored best at its first evaluation and then
    sat at chance (a classifier's cross-entropy at ln 10 after a rate too high for it) never improved on
    it, and patience-k stops it where the default let it run to its end.

    ``unlearned`` (off by default and in the ``default`` policy; needs ``unimproved_share``): a run whose
    best has moved from its first value by no more than ``learned_noise`` times its step-to-step noise has
    made no progress that can be told from noise, so the pace and ``retreat`` (shares of that progress)
    cannot judge it either; it is judged as a run that never improved, from its best: stopped when each of
    its last ``retreat_window`` values is worse than the best by more than ``unimproved_share`` of the
    best's size and ``retreat_noise`` times the step-to-step noise, under the same floor, guard and holds.
    A model that scores near its best from its first evaluation (breast cancer at 0.965 after one epoch,
    0.974 at its second) and then overfits (0.97 down to 0.91 over 40 evaluations, its training loss down
    to 0.005) was let run to its end, where patience-k stops it within ten evaluations of its best. On the
    watched metric such a run looks like one at chance that will learn later (a 10-class CNN at 0.03 to 0.08,
    its best at its 69th of 80 evaluations, was stopped at its 23rd), so the ``default`` leaves it off; it
    suits runs known to start trained, as fine-tuning does.

    ``loss_holds_jitter`` (off by default; the ``default`` policy sets it): a retreat from a best the run
    has not moved beyond its own jitter (its progress within ``learned_spread`` times the spread of its last
    8 values, the bar under which the pace is not judged at all) is held while a validation loss
    (``loss_key``) still falls, before the plan's floor as after it, and neither a steady retreat nor
    ``STEADY_STEPS`` of the metric's own steps lifts that hold. A 10-class CNN near chance (0.108 to a best of
    0.153 on 360 samples) wandered back down 12 samples, as steadily as a fine metric falls, while its loss
    still fell; it was stopped at its 14th of 80 evaluations and would have reached 0.9.

    ``retreat`` (off by default; the ``default`` policy sets 0.05): also stop a run that has moved away
    from its best, as patience-k does and the pace alone cannot (a best that stopped moving takes a whole
    doubling to show it): each of the last ``retreat_window`` evaluations falls short of the best by more
    than ``retreat`` times the run's progress and ``retreat_noise`` times its step-to-step noise, and the
    progress itself exceeds ``learned_noise`` times that noise (a lucky spike of a run at chance is not a
    best to retreat from). The same guards of plan and learning rate apply: a decaying rate can bring a
    run back.
    """

    rule: Literal["outlook"] = "outlook"
    relative_delta: float = Field(default=0.02, gt=0.0, le=1.0, allow_inf_nan=False)
    min_evaluations: int = Field(default=8, ge=2, le=1000)
    min_progress: float = Field(default=0.2, ge=0.0, le=1.0)
    learned_noise: float = Field(default=3.0, ge=0.0, le=100.0, allow_inf_nan=False)
    learned_spread: float = Field(default=3.0, ge=0.0, le=100.0, allow_inf_nan=False)
    planned_steps: int | None = Field(default=None, ge=1, le=MAX_STEP)
    lr_key: MetricNames | None = None
    lr_fraction: float = Field(default=1.0, gt=0.0, le=1.0)
    noise_discount: float = Field(default=0.0, ge=0.0, le=100.0, allow_inf_nan=False)
    resolution_share: float = Field(default=0.0, ge=0.0, le=10.0, allow_inf_nan=False)
    retreat: float | None = Field(default=None, gt=0.0, le=10.0, allow_inf_nan=False)
    retreat_window: int = Field(default=6, ge=2, le=_NOISE_WINDOW)
    retreat_noise: float = Field(default=3.0, ge=0.0, le=100.0, allow_inf_nan=False)
    rising_t: float | None = Field(default=None, gt=0.0, le=100.0, allow_inf_nan=False)
    early_retreat_t: float | None = Field(default=None, gt=0.0, le=100.0, allow_inf_nan=False)
    blind_min_progress: float | None = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)
    blind_early_retreat_t: float | None = Field(default=None, gt=0.0, le=100.0, allow_inf_nan=False)
    blind_headroom: float | None = Field(default=None, ge=0.0, le=10.0, allow_inf_nan=False)
    blind_mid_headroom: float | None = Field(default=None, ge=0.0, le=10.0, allow_inf_nan=False)
    blind_mid_progress: float | None = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)
    unplanned_evaluations: int | None = Field(default=None, ge=2, le=1000)
    final_share: float | None = Field(default=None, gt=0.0, le=1.0, allow_inf_nan=False)
    steady_retreat_t: float | None = Field(default=None, gt=0.0, le=100.0, allow_inf_nan=False)
    unimproved_share: float | None = Field(default=None, gt=0.0, le=10.0, allow_inf_nan=False)
    unlearned: bool = False
    loss_holds_jitter: bool = False
    loss_key: MetricNames | None = None
    train_key: MetricNames | None = None
    overfit_share: float = Field(default=0.1, gt=0.0, le=1.0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _unlearned_has_its_bar(self) -> OutlookParams:
        # unlearned judges with unimproved_share's bar: without it the flag would silently do nothing.
        if self.unlearned and self.unimproved_share is None:
            raise ValueError("outlook's unlearned needs unimproved_share (the bar it judges by), got none")
        return self


class Outlook(Rule[OutlookParams]):
    """NaN/inf move nothing (``non_finite`` judges them). Ties do not improve. Silent after it stops."""

    name = "outlook"

    def __init__(self, params: OutlookParams, *, monitor: str, mode: Mode) -> None:
        super().__init__(params, monitor=monitor, mode=mode)
        self._lr_names = Names.of(params.lr_key)
        self._loss_names = loss_names(params.loss_key, monitor, mode)
        self._train_names = train_loss_names(params.train_key, monitor)
        self._companions = frozenset((*self._loss_names.order, *self._train_names.order))
        self._share = names_a_share(monitor, mode)

    def required_keys(self) -> tuple[str, ...]:
        return (*self._lr_names.order, *self._loss_names.order, *self._train_names.order)

    def initial_state(self) -> State:
        return {
            "first": None,
            "path": [],
            "recent": [],
            "seen": 0,
        }

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        # In place (evaluate handed this rule its own copy of the state), and cheap on the common path: this
        # runs on every monitored point of the default policy.
        extras = obs.extras
        lr = self._lr_names.read(extras) if extras else None
        if lr is not None and lr != state.get("lr") and math.isfinite(lr):  # the same rate: nothing moves
            state["lr_rising"] = lr > (state.get("lr") or 0.0)
            state["lr"], state["lr_peak"] = lr, max(state.get("lr_peak") or 0.0, lr)
        elif state.get("lr_rising"):
            state["lr_rising"] = False
        if extras and not self._companions.isdisjoint(extras):  # a validation or training loss logged
            loss = self._loss_names.read(extras)
            if loss is not None:
                observe_loss(state, obs.step, loss)
            train_loss = self._train_names.read(extras)
            if train_loss is not None:
                _observe_train(state, train_loss)
        value, step, best = obs.value, obs.step, ctx.best
        if not math.isfinite(value):
            return state, None
        if best.improved:
            if self._train_names:
                state["train_at_best"] = state.get("train_low")
            if best.value is not None:  # improved: the best is this finite value
                keep_best(state["path"], step, best.value)
        recent = state["recent"]
        recent.append(value)
        recent_steps = state.get("recent_steps")
        if recent_steps is None:  # absent from states stored by earlier releases
            recent_steps = state["recent_steps"] = []
        recent_steps.append(step)
        if len(recent) > _NOISE_WINDOW:
            del recent[0]
        excess = len(recent_steps) - len(recent)
        if excess:
            del recent_steps[:excess]
        if state["first"] is None:
            state["first"] = value
        state["seen"] += 1
        return state, self._stop_if_spent(state, obs, ctx, lr)

    def _stop_if_spent(
        self, state: State, obs: Observation, ctx: Context, lr: float | None
    ) -> Verdict | None:
        """A stop when the run's outlook is spent (or it has retreated from its best), else None."""
        # Cheapest tests first: this runs on every monitored point, and most points end at the first two.
        p = self.params
        t = obs.step
        declared = p.planned_steps or ctx.planned_steps
        planned = declared or 2 * t
        if state["seen"] < p.min_evaluations or t <= 0:
            return None
        if not declared and state["seen"] < (p.unplanned_evaluations or 0):  # no floor of min_progress
            return None
        # Blind (a plan, and neither a rate nor a validation loss logged): judged later, and before that
        # retreating only more steadily. A rate or a loss seen once lifts it: a run logs them from its start.
        blind_floor = p.blind_min_progress if declared and self._blind(state) else None
        tier = None
        if blind_floor is not None and t < blind_floor * planned:
            tier = self._blind_tier(state, ctx, t, planned)
            if tier is None:
                stop = self._early_retreat(state, obs, ctx, planned, lr, blind=True)
                if stop is None and t >= p.min_progress * planned and not state.get("blind_said"):
                    # From here the floor holds back a run the others would judge: said once, while the
                    # trainer can still log the rate or the loss (here, or in its next run).
                    state["blind_said"] = True
                    return self._blind_alert(obs, planned, blind_floor)
                return stop
            blind_floor = None  # near its perfect score: no schedule can add much, judged as the others
        if t < p.min_progress * planned:
            return self._early_retreat(state, obs, ctx, planned, lr, blind=False)
        overfit = None
        # A rate at its peak and not rising (a constant schedule so far) holds nothing: asked first, cheaply.
        at_peak = lr == state.get("lr_peak") and not state.get("lr_rising")
        if lr is not None and not at_peak and self._schedule_pending(state, lr):
            overfit = self._overfit(state, obs, ctx.best.step)
            if overfit is None:
                return None
        best, first = ctx.best.value, state["first"]
        if best is None:  # never: this value is finite, so it set or kept a finite best
            return None
        progress = abs(best - first)
        if progress == 0.0:
            # A schedule still to come holds a run that never improved, overfitting or not: with its best at
            # its first evaluation, a training loss that fell since then says it learns, not that it
            # overfits (a rate too high blew the loss up after its first value; it fell below it as the
            # rate decayed).
            if p.unimproved_share is None or overfit is not None:
                return None
            return self._unimproved(state, obs, ctx, planned, lr)
        due = rise = None
        steady = False
        # The latest value within the retreat's share of the best ends the retreat test (most points of a
        # run near its best), without the call.
        if p.retreat is not None and (best - obs.value if self.mode == "max" else obs.value - best) > (
            p.retreat * progress
        ):
            due = self._retreat_due(state, obs, ctx, progress)
        elif (
            p.steady_retreat_t is not None
            # The latest value worse than the first of the window, asked inline before the call that asks it
            # with the rest: most points end here, on the engine's hot path.
            and (obs.value < state["recent"][0] if self.mode == "max" else obs.value > state["recent"][0])
            and self._may_retreat_steadily(state, obs, ctx)
        ):
            steadily = self._steady_retreat(state, obs, ctx, progress, planned, p.steady_retreat_t)
            if steadily is not None:
                due, rise, steady = steadily[0], steadily[1], True
        # A new best in the last final_share of a declared plan is no spent outlook (cheapest tests first; a
        # new best is never behind itself, so no retreat is due there either).
        if declared and ctx.best.improved and self._in_final_share(declared, t):
            return None
        spent = None if due is not None else self._spent_due(state, t, best, progress, planned)
        if due is None and spent is None:
            # Neither test judges a run whose progress is within its noise: judged as one that never
            # improved, from its best. The latest value within the share of the best ends it cheaply.
            if (
                p.unlearned
                and p.unimproved_share is not None  # set with unlearned (validated); for the type checker
                and overfit is None
                and (best - obs.value if self.mode == "max" else obs.value - best)
                > p.unimproved_share * abs(best)
            ):
                return self._unimproved(state, obs, ctx, planned, lr, progress=progress)
            return None
        # A stop is due. The holds cost more than the tests above, so they are asked only now.
        loss = self._loss_outlook(state, obs, planned)
        held_by_loss = loss_still_falls(loss)
        if held_by_loss:
            # Learning, whatever the metric shows; unless the metric has left its best steadily (by
            # early_retreat_t standard errors of its slope) and by at least STEADY_STEPS of its own steps: a
            # model whose accuracy on a large set falls while its loss still falls (more confident, less
            # often right). A small set's accuracy can step down a few samples as steadily and climb back
            # while its loss falls (boosted trees on 120 samples): that is held.
            if due is None or p.early_retreat_t is None or self._within_jitter(state, progress):
                return None
            rise = rise or self._rise(state, best, progress, planned)
            if rise[0] > -p.early_retreat_t or due[0] < STEADY_STEPS * share_resolution(
                [*state["recent"], best], self._share
            ):
                return None
        rise_t = None
        if p.rising_t is not None:
            rise_t, passes_best = rise or self._rise(state, best, progress, planned)
            if passes_best and rise_t >= p.rising_t:
                return None
        if due is not None:
            if (held_by_loss or steady) and rise is not None:
                rise_t = rise[0]
            overriding = loss if held_by_loss else None
            return self._retreat_stop(
                obs,
                ctx,
                due,
                progress,
                planned,
                lr,
                rise_t,
                overfit=overfit,
                loss=overriding,
                blind=blind_floor,
                headroom=tier,
                steady=p.steady_retreat_t if steady else None,
            )
        assert spent is not None
        evidence = {
            **spent,
            "lr": lr,
            "rise_t": _finite(rise_t),
            "rising_t": p.rising_t,
            "blind_min_progress": blind_floor,
            "headroom": tier.room if tier is not None else None,
            "blind_headroom": tier.share if tier is not None else None,
            "headroom_floor": tier.floor if tier is not None else None,
            **(loss or {}),
            **(overfit or {}),
        }
        return self._spent(ctx.best, obs, evidence)

    def _unimproved(
        self,
        state: State,
        obs: Observation,
        ctx: Context,
        planned: int,
        lr: float | None,
        *,
        progress: float = 0.0,
    ) -> Verdict | None:
        """The stop of a run whose best is still its first value (``progress`` 0), or has moved from it by
        no more than ``learned_noise`` times the step-to-step noise (``unlearned``), when each of its last
        ``retreat_window`` values is worse than that best by more than ``unimproved_share`` of its size and
        ``retreat_noise`` times the step-to-step noise, and neither a validation loss that still falls nor
        a steady rise holds it; else None. The caller has applied the plan's floor and the learning-rate
        guard."""
        p = self.params
        assert p.unimproved_share is not None  # the caller asks only then
        recent, first, seen = state["recent"], state["first"], ctx.best
        best = first if seen.value is None else seen.value  # the first value itself when progress is 0
        window = p.retreat_window
        if len(recent) < window or state["seen"] <= window:
            return None  # the first value (the best) is among the values asked
        asked = recent[-window:]
        shortfall = best - max(asked) if self.mode == "max" else min(asked) - best
        if shortfall <= p.unimproved_share * abs(best):  # a best of 0 asks only the noise
            return None
        jitter = step_noise(recent)
        if progress > p.learned_noise * jitter:
            return None  # progress that noise cannot make: the pace and the retreat judge it
        bar = max(p.unimproved_share * abs(best), p.retreat_noise * jitter)
        if shortfall <= bar:
            return None
        loss = self._loss_outlook(state, obs, planned)
        if loss_still_falls(loss):
            return None
        rise_t = None
        if p.rising_t is not None:
            rise_t, passes_best = self._rise(state, best, progress, planned)
            if passes_best and rise_t >= p.rising_t:
                return None
        if progress == 0.0:
            reason = (
                f"{self.monitor} has not improved on its first value {fmt(first)} (step {seen.step}) in "
                f"{state['seen'] - 1} evaluations, and its last {window} are worse than it by at least "
            )
        else:
            reason = (
                f"{self.monitor} has gained {progress:.3g} on its first value {fmt(first)}, within "
                f"{p.learned_noise:g}x its step-to-step noise, so it is judged as a run that never improved: "
                f"its last {window} are worse than its best {fmt(best)} (step {seen.step}) by at least "
            )
        reason += (
            f"{shortfall:.3g}: more than {p.unimproved_share:g} of its size and {p.retreat_noise:g}x its "
            f"step-to-step noise ({_noise_said(jitter)}); "
        )
        # Why a validation loss logged beside the monitor held nothing back; the monitor read as its own
        # validation loss (a minimised loss) is what the clause above says.
        if loss is not None and loss["loss_key"] != self.monitor:
            reason += loss_said(loss, p.relative_delta)
        reason += f"keep step {seen.step}"
        return self.stop(
            obs,
            reason=reason,
            evidence={
                "first": first,
                **({"progress": progress, "learned_noise": p.learned_noise} if progress else {}),
                "shortfall": shortfall,
                "unimproved_share": p.unimproved_share,
                "retreat_window": window,
                **self._bars_evidence(jitter, bar, planned, lr, rise_t),
                **(loss or {}),
            },
            best_step=seen.step,
            best_value=seen.value,
            headline=f"{self.monitor} has never improved on its first value",
        )

    def _loss_outlook(self, state: State, obs: Observation, planned: int) -> dict[str, Any] | None:
        """The logged validation loss's own outlook at ``obs`` (see :func:`loss_outlook`), or None when
        ``loss_key`` is off or the run has not logged it."""
        if not self._loss_names:
            return None
        name = self._loss_names.read_name(obs.extras)
        return loss_outlook(state, name, obs.step, planned, self.params.relative_delta)

    def _within_jitter(self, state: State, progress: float) -> bool:
        """Whether ``loss_holds_jitter`` is set and the run's progress is within ``learned_spread`` times
        the spread of its last 8 values: no more than it wanders, so a retreat from that best is no
        evidence against a validation loss that still falls."""
        if not self.params.loss_holds_jitter:
            return False
        recent = state["recent"]
        return bool(progress <= self.params.learned_spread * (max(recent) - min(recent)))

    def _in_final_share(self, declared: int, t: int) -> bool:
        """Whether step ``t`` lies in the last ``final_share`` of the declared plan (where a new best is
        not judged a spent outlook)."""
        share = self.params.final_share
        return share is not None and t > declared - share * declared

    def _overfit(self, state: State, obs: Observation, best_step: int | None) -> dict[str, Any] | None:
        """The evidence that the run overfits (its training loss has fallen by at least ``overfit_share``
        of its whole fall since the watched metric's best, at ``best_step``), else None."""
        p = self.params
        first, low, at_best = state.get("train_first"), state.get("train_low"), state.get("train_at_best")
        if not self._train_names or first is None or low is None or at_best is None or first <= low:
            return None
        since_best = at_best - low
        if since_best < p.overfit_share * (first - low):
            return None
        # A validation loss (loss_key) that set a new low since that best says the model still generalises
        # better: not overfitting, whatever the watched metric's noise shows.
        loss_path = state.get("loss_path")
        if loss_path and best_step is not None and loss_path[-1][0] > best_step:
            return None
        return {
            "train_key": self._train_names.read_name(obs.extras),
            "train_fall_since_best": since_best,
            "train_fall": first - low,
            "overfit_share": p.overfit_share,
        }

    def _spent_due(
        self, state: State, t: int, best: float, progress: float, planned: int
    ) -> dict[str, Any] | None:
        """The evidence of a spent outlook (the best's pace over the last doubling, carried to the planned
        end, is at most ``relative_delta`` of the progress, and the run has learned), else None."""
        p = self.params
        path = state["path"]
        earlier, state["half"] = best_at_half_after(path, t, state.get("half", 0))
        if earlier is None:
            return None
        raw_pace = abs(best - earlier)  # gain of the best over the last doubling of the run
        doublings = math.log2(planned / t) if planned > t else 0.0  # doublings_left, inline: every point
        bar = p.relative_delta * progress
        if p.noise_discount == 0.0 and raw_pace * doublings > bar:
            return None
        jitter = step_noise(state["recent"]) if p.noise_discount else 0.0
        # The metric's step is read only here, where the pace seen would pass: most points end above. It is
        # read from every value kept (the recent ones, the bests so far, the first): from a few it can read
        # coarser than the truth (2/3 and 1/3 alone read thirds, where 14/30 among them reads thirtieths),
        # and from their differences, so an accuracy in percent reads the same step relative to its scale.
        step = None
        if p.resolution_share:
            step = step_between([*state["recent"], *(value for _, value in path), state["first"]])
        unseen = p.resolution_share * step if step else 0.0
        pace = max(0.0, raw_pace - p.noise_discount * jitter) + unseen
        outlook = pace * doublings
        if outlook > bar:
            return None
        recent = state["recent"]
        noise = noise_sigma(recent)
        spread = max(recent) - min(recent)
        if progress <= p.learned_noise * noise or progress <= p.learned_spread * spread:
            return None
        return {
            "pace": pace,
            "raw_pace": raw_pace,
            "step_noise": jitter,
            "resolution": step,
            "unseen_gain": unseen,
            "doublings_left": doublings,
            "outlook": outlook,
            "progress": progress,
            "relative_delta": p.relative_delta,
            "bar": bar,
            "noise": noise,
            "spread": spread,
            "planned_steps": planned,
        }

    def _spent(self, seen: BestSoFar, obs: Observation, evidence: dict[str, Any]) -> Verdict:
        """The stop when the outlook is spent, its sentence written from its evidence."""
        e, t = evidence, obs.step
        counted = f" ({e['pace']:.3g} beyond its step-to-step noise)" if self.params.noise_discount else ""
        if e["unseen_gain"]:  # a coarse metric: the gain counted includes what its steps cannot show
            counted += (
                f" (counted as {e['pace']:.3g} with {self.params.resolution_share:g} of the metric's step, "
                f"{e['resolution']:.3g}: a gain smaller than a step does not show)"
            )
        reason = (
            f"{self.monitor} gained {e['raw_pace']:.3g}{counted} on its best over the last doubling of the "
            f"run (steps {t // 2}-{t}); at that pace the {e['doublings_left']:.2g} doublings left to the "
            f"planned end (step {e['planned_steps']}) add {e['outlook']:.3g}, at most "
            f"{e['relative_delta']:g} of its progress so far ({e['progress']:.3g}); "
        )
        if e["blind_min_progress"] is not None:
            reason += _blind_said(e["blind_min_progress"])
        if e["headroom"] is not None and seen.value is not None:
            reason += self._headroom_said(
                e["headroom"], e["blind_headroom"], e["headroom_floor"], e["progress"], seen.value
            )
        # The monitor read as its own validation loss (a minimised loss) fell by its own pace, said above: the
        # clause would repeat it. The evidence keeps it.
        if "loss_key" in e and e["loss_key"] != self.monitor:
            reason += loss_said(e, e["relative_delta"])
        if "train_key" in e:
            reason += _overfit_said(e)
        reason += f"keep step {seen.step} ({fmt(seen.value)})"
        headline = (
            f"{self.monitor} is still improving, but too slowly to matter before step {e['planned_steps']}"
            if e["raw_pace"] > 0
            else f"{self.monitor} has stopped improving"
        )
        return self.stop(
            obs,
            reason=reason,
            evidence=evidence,
            best_step=seen.step,
            best_value=seen.value,
            headline=headline,
        )

    def _schedule_pending(self, state: State, lr: float) -> bool:
        """Whether the logged learning rate says the schedule has gains to come: it is still warming up
        (it rose since the last evaluation), or it has started to decay and is still above ``lr_fraction``
        of its peak. A rate flat at its peak (a constant schedule so far) holds nothing back, and neither
        does any rate once the metric has taken exactly the same value at each of the last 8 evaluations:
        a model whose validation predictions no longer change while its rate falls has converged under it
        (on a small validation set, runs sit on one value for tens of evaluations while a cosine decays)."""
        peak = state.get("lr_peak") or 0.0
        warming = bool(state.get("lr_rising") and state["seen"] > 1)
        pending = warming or self.params.lr_fraction * peak < lr < peak
        recent = state["recent"]
        return pending and not (len(recent) == _NOISE_WINDOW and all(v == recent[0] for v in recent))

    def _blind_tier(self, state: State, ctx: Context, t: int, planned: int) -> _Tier | None:
        """The tier of headroom that lifts a blind run's later floor at step ``t``, if any: the first
        (within ``blind_headroom`` of its progress from the metric's perfect score, from ``min_progress`` of
        the plan), else the middle one (``blind_mid_headroom``, from ``blind_mid_progress``)."""
        p = self.params
        open_tiers = [
            (share, floor)
            for share, floor in (
                (p.blind_headroom, p.min_progress),
                (p.blind_mid_headroom, p.blind_mid_progress),
            )
            if share is not None and floor is not None and t >= floor * planned
        ]
        if not open_tiers:
            return None
        measured = self._room(state, ctx)
        if measured is None:
            return None
        room, progress = measured
        for share, floor in open_tiers:
            if room <= share * progress:
                return _Tier(room, share, floor)
        return None

    def _room(self, state: State, ctx: Context) -> tuple[float, float] | None:
        """How far the best is from the metric's perfect score, and the run's progress (from its first value
        to its best); None where the perfect score is unknown. The perfect score is read as ``perfect`` reads
        it, from the values this rule keeps (the first, the recent ones and the best, which is the highest in
        mode max and the lowest in mode min)."""
        best, first = ctx.best.value, state["first"]
        if best is None or first is None:
            return None
        kept = (first, best, *state["recent"])
        low, high = (min(kept), best) if self.mode == "max" else (best, max(kept))
        perfect = perfect_score(
            self.mode,
            low,
            high,
            between=any(0.0 < v < 1.0 for v in kept),
            percent=self._share and any(in_percent(v) for v in kept),
            named_share=self._share,
        )
        if perfect is None:
            return None
        return abs(best - perfect), abs(best - first)

    def _headroom_said(self, room: float, share: float, floor: float, progress: float, best: float) -> str:
        perfect = best + room if self.mode == "max" else best - room
        return (
            f"neither a learning rate nor a validation loss is logged, but the best is within {room:.3g} of "
            f"the metric's perfect score ({fmt(perfect)}), at most {share:g} of its "
            f"progress ({progress:.3g}), so it is judged from {floor:g} of its plan; "
        )

    def _blind_alert(self, obs: Observation, planned: int, floor: float) -> Verdict:
        """The ``blind`` alert at ``obs``: the first evaluation a blind run's later floor holds back."""
        p = self.params
        lr_names, loss_names_ = ", ".join(self._lr_names.order[:2]), ", ".join(self._loss_names.order[:2])
        mid = ""
        if p.blind_mid_headroom is not None and p.blind_mid_progress is not None:
            mid = (
                f"; from {p.blind_mid_progress:g}, step {math.ceil(p.blind_mid_progress * planned)}, once "
                f"its best is within {p.blind_mid_headroom:g} of its progress from the metric's perfect "
                "score"
            )
        return Verdict(
            action="alert",
            rule=BLIND_ALERT,
            step=obs.step,
            reason=(
                f"neither a learning rate ({lr_names or 'lr_key unset'}) nor a validation loss "
                f"({loss_names_ or 'loss_key unset'}) has been logged with {self.monitor}: {self.name} "
                f"judges this run only from {floor:g} of its plan (step {math.ceil(floor * planned)}{mid}), "
                f"not from {p.min_progress:g} (step {math.ceil(p.min_progress * planned)}), as a "
                "learning-rate schedule it cannot see may still lift the run late; log the rate (the SDK's "
                "run.watch_optimizer(optimizer) does) or the validation loss in the same call as "
                f"{self.monitor} to be judged from {p.min_progress:g}"
            ),
            evidence={
                "monitor": self.monitor,
                "step": obs.step,
                "planned_steps": planned,
                "blind_min_progress": floor,
                "blind_mid_headroom": p.blind_mid_headroom,
                "blind_mid_progress": p.blind_mid_progress,
                "min_progress": p.min_progress,
                "lr_key": list(self._lr_names.order),
                "loss_key": list(self._loss_names.order),
            },
        )

    @staticmethod
    def _blind(state: State) -> bool:
        """Neither a learning rate nor a validation loss has been logged so far (this rule keeps its rate's
        peak under the key :func:`lr_seen` reads)."""
        return not lr_seen(state) and not loss_seen(state)

    def _early_retreat(
        self, state: State, obs: Observation, ctx: Context, planned: int, lr: float | None, *, blind: bool
    ) -> Verdict | None:
        """Before the plan's floor (``min_progress``, or ``blind_min_progress`` for a ``blind`` run): the
        ``retreat`` stop, only for a run whose last values move away from its best by at least
        ``early_retreat_t`` (``blind_early_retreat_t``) standard errors of their slope; else None."""
        p = self.params
        steady_t = p.blind_early_retreat_t if blind else p.early_retreat_t
        if steady_t is None:
            return None
        best, first = ctx.best.value, state["first"]
        if p.retreat is None or best is None or best == first:
            return None
        progress = abs(best - first)
        due = self._retreat_due(state, obs, ctx, progress)
        rise_t: float | None = None
        steady = None
        if due is None and p.steady_retreat_t is not None and self._may_retreat_steadily(state, obs, ctx):
            # A steady retreat asks for no share of the progress, and for the steadier of the two bars.
            steadier = max(steady_t, p.steady_retreat_t)
            steadily = self._steady_retreat(state, obs, ctx, progress, planned, steadier)
            if steadily is not None:
                due, (rise_t, _) = steadily
                steady = steadier
        if due is None:
            return None
        if lr is not None and self._schedule_pending(state, lr):
            return None
        if self._within_jitter(state, progress) and loss_still_falls(self._loss_outlook(state, obs, planned)):
            return None
        if rise_t is None:
            rise_t, _ = self._rise(state, best, progress, planned)
        if rise_t > -steady_t:
            return None
        early = (steady_t, p.blind_min_progress if blind else p.min_progress, blind)
        return self._retreat_stop(obs, ctx, due, progress, planned, lr, rise_t, early=early, steady=steady)

    def _may_retreat_steadily(self, state: State, obs: Observation, ctx: Context) -> bool:
        """The cheap tests of a steady retreat (``steady_retreat_t``), asked before its costlier ones on
        every point that is not within the retreat's share of the best: a full window of recent values, the
        best older than the last ``retreat_window`` of them, the latest worse than the first (a line that
        moves away from the best by many standard errors of its slope ends worse than it began), and the
        latest the worst of the last ``retreat_window`` (a retreat is judged when it has gone furthest: a
        noisy step back towards the best waits for the next value, and most points of a run that wanders
        near its best end here, before its noise is read)."""
        recent, steps = state["recent"], state.get("recent_steps")
        best_step, value, window = ctx.best.step, obs.value, self.params.retreat_window
        if len(recent) < _NOISE_WINDOW or not steps or best_step is None:
            return False
        if best_step >= steps[-window]:  # the best is among the values asked
            return False
        if self.mode == "max":
            return bool(value < recent[0] and value <= min(recent[-window:]))
        return bool(value > recent[0] and value >= max(recent[-window:]))

    def _steady_retreat(
        self, state: State, obs: Observation, ctx: Context, progress: float, planned: int, steady_t: float
    ) -> tuple[tuple[float, float, float], tuple[float, bool]] | None:
        """(the retreat's evidence, the rise) when the last values fall short of the best by more than the
        noise bar alone and move away from it by at least ``steady_t`` standard errors of their slope;
        else None."""
        due = self._retreat_due(state, obs, ctx, progress, share=False)
        if due is None:
            return None
        best = ctx.best.value
        assert best is not None  # _retreat_due found a best
        rise = self._rise(state, best, progress, planned)
        return (due, rise) if rise[0] <= -steady_t else None

    def _rise(self, state: State, best: float, progress: float, planned: int) -> tuple[float, bool]:
        """The t-statistic of the rise of the recent values (their least-squares slope over their steps,
        in standard errors; signed so that a rise towards better is positive, infinite for an exact line), and
        whether that line, carried to the planned end, passes the best by more than ``relative_delta`` of
        the progress."""
        ys, xs = state["recent"], state.get("recent_steps") or []
        n = len(ys)
        if n < 4 or len(xs) != n or min(xs) == max(xs):
            return 0.0, False
        slope, _, residuals = ols(xs, ys)
        mean_x, mean_y = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mean_x) * (x - mean_x) for x in xs)
        sign = 1.0 if self.mode == "max" else -1.0
        rise = sign * slope
        se = math.sqrt(sum(r * r for r in residuals) / (n - 2) / sxx)
        t = rise / se if se > 0.0 else (math.copysign(math.inf, rise) if rise else 0.0)
        at_end = mean_y + slope * (planned - mean_x)  # about the means: steps reach 2^62
        return t, sign * (at_end - best) > self.params.relative_delta * progress

    def _retreat_due(
        self, state: State, obs: Observation, ctx: Context, progress: float, *, share: bool = True
    ) -> tuple[float, float, float] | None:
        """(shortfall, step noise, bar) when each of the last ``retreat_window`` values falls short of the
        best by more than the bars (a share of the progress unless ``share`` is False, a multiple of the
        step-to-step noise); None otherwise."""
        p = self.params
        retreat = (p.retreat or 0.0) if share else 0.0  # set: the caller asks only then
        recent = state["recent"]
        best = ctx.best.value
        if best is None:
            return None
        sign = 1.0 if self.mode == "max" else -1.0
        # The latest value first: on most points of a run still at or near its best this ends it.
        if sign * (best - obs.value) <= retreat * progress or len(recent) < p.retreat_window:
            return None
        # The window's worst value gives the smallest shortfall (rounding is monotone: the same number as the
        # least of the shortfalls, without a generator; this runs on every point a steady retreat may be).
        window = recent[-p.retreat_window :]
        shortfall = best - max(window) if sign > 0 else min(window) - best
        if shortfall <= retreat * progress:  # under the lower bar already: the noise is not asked
            return None
        jitter = step_noise(recent)
        bar = max(retreat * progress, p.retreat_noise * jitter)
        if shortfall <= bar or progress <= p.learned_noise * jitter:
            return None
        return shortfall, jitter, bar

    def _bars_evidence(
        self, jitter: float, bar: float, planned: int, lr: float | None, rise_t: float | None
    ) -> dict[str, Any]:
        """The evidence a stop by shortfall shares (``retreat``, ``unimproved_share``): the noise and the
        bar it was read against, the plan, the rate, and the rise that did not hold it."""
        return {
            "step_noise": jitter,
            "retreat_noise": self.params.retreat_noise,
            "bar": bar,
            "planned_steps": planned,
            "lr": lr,
            "rise_t": _finite(rise_t),
            "rising_t": self.params.rising_t,
        }

    def _retreat_stop(
        self,
        obs: Observation,
        ctx: Context,
        due: tuple[float, float, float],
        progress: float,
        planned: int,
        lr: float | None,
        rise_t: float | None,
        *,
        early: tuple[float, float | None, bool] | None = None,
        overfit: dict[str, Any] | None = None,
        loss: dict[str, Any] | None = None,
        blind: float | None = None,
        headroom: _Tier | None = None,
        steady: float | None = None,
    ) -> Verdict:
        """The ``retreat`` stop, its sentence written from its evidence. ``early``: before the plan's
        floor, which only a steady move away from the best passes (that many standard errors, the floor's
        share of the plan, and whether the run is blind). ``blind``: the later floor a blind run was
        judged from; ``headroom``: how near its perfect score a blind run judged without it was. ``loss``:
        the outlook of a validation loss that still falls, which that same steady move overrides.
        ``steady``: the standard errors of a steady retreat, which asks for no share of the progress."""
        p = self.params
        shortfall, jitter, bar = due
        best, best_step = ctx.best.value, ctx.best.step
        reason = (
            f"{self.monitor} has stayed worse than its best {fmt(best)} (step {best_step}) for its "
            f"last {p.retreat_window} evaluations, by at least {shortfall:.3g}: more than "
            + (f"{p.retreat:g} of its progress ({progress:.3g}) and " if steady is None else "")
            + f"{p.retreat_noise:g}x its step-to-step noise ({_noise_said(jitter)})"
        )
        if steady is not None:
            moves = _steadily(-(rise_t or 0.0), steady, "their")
            no_share = f"no share of its progress ({progress:.3g}) is asked"
            if early is None and loss is None:
                reason += (
                    f", and its last {_NOISE_WINDOW} values move away from it steadily ({moves}): {no_share}"
                )
            else:  # the clause below says how steady the move is
                reason += f" ({no_share} of a move as steady as the one below)"
        if early is not None:
            steady_t, floor, was_blind = early
            reason += (
                ", and its recent values move away from it steadily ("
                + _steadily(-(rise_t or 0.0), steady_t, "their")
                + (", with neither a learning rate nor a validation loss logged" if was_blind else "")
                + f"), so it is stopped before {floor or 0.0:g} of its planned end (step {planned})"
            )
        elif loss is not None:
            # A loss a little above its lowest (under the share read as turned up) is held by its lowest's
            # pace: "still falls" would say what a user reading its curve would not see.
            turn, lowest, above = loss["loss_turn"], "", ""
            if turn > 0:
                lowest = "'s lowest"
                above = (
                    f"; its latest is {turn:.2g} of that fall above its lowest, under the {TURNED_UP:g} read "
                    "as turned up"
                )
            reason += (
                f", although {loss['loss_key']}{lowest} still falls "
                f"({loss['loss_outlook']:.3g} to the planned end, more than {p.relative_delta:g} of its own "
                f"fall{above}): the metric moves away from its best "
                f"steadily ({_steadily(-(rise_t or 0.0), p.early_retreat_t or 0.0, 'its')}) and by more than "
                f"{STEADY_STEPS} of its steps"
            )
        reason += f"; {_overfit_said(overfit)}" if overfit else "; "
        reason += _blind_said(blind) if blind is not None else ""
        reason += (
            self._headroom_said(headroom.room, headroom.share, headroom.floor, progress, best)
            if headroom is not None and best is not None
            else ""
        )
        reason += f"keep step {best_step}"
        return self.stop(
            obs,
            reason=reason,
            evidence={
                "shortfall": shortfall,
                "retreat": p.retreat,
                "retreat_window": p.retreat_window,
                "progress": progress,
                **self._bars_evidence(jitter, bar, planned, lr, rise_t),
                "early_retreat_t": early[0] if early else (p.early_retreat_t if loss is not None else None),
                "steady_retreat_t": steady,
                "blind": early[2] if early else blind is not None,
                "floor": early[1] if early else blind,
                "headroom": headroom.room if headroom is not None else None,
                "blind_headroom": headroom.share if headroom is not None else None,
                "headroom_floor": headroom.floor if headroom is not None else None,
                **(loss or {}),
                **(overfit or {}),
            },
            best_step=best_step,
            best_value=best,
            headline=f"{self.monitor} has stayed worse than its best for {p.retreat_window} evaluations",
        )


def _blind_said(floor: float) -> str:
    return f"judged from {floor:g} of its plan, as neither a learning rate nor a validation loss is logged; "


# Standard errors of a slope past which the values lie on a line but for rounding (said as an exact line).
_EXACT_T = 1e6


def _steadily(t: float, bar: float, whose: str) -> str:
    """How steadily values move, in words: ``t`` standard errors of the slope against ``bar``. Values on an
    exact line (given values, not a training's) have no scatter to measure the slope against, and ``t`` is
    infinite, or past a million where rounding leaves a residue: said so, not as "inf standard errors"."""
    if math.isnan(t) or abs(t) < _EXACT_T:
        return f"by {t:.3g} standard errors of {whose} slope, at least {bar:g}"
    return f"on an exact line, with no scatter about {whose} slope: past any bar of standard errors ({bar:g})"


def _noise_said(jitter: float) -> str:
    """A step-to-step noise in words: exactly 0 (``step_noise`` reads rounding's residue as none) only for
    values that move by exactly even steps, as given values do."""
    return f"{jitter:.3g}" if jitter else "0: its values move by exactly even steps"


def _finite(t: float | None) -> float | None:
    """A statistic for the evidence, which is JSON: an exact line's infinite t is left out (None)."""
    return t if t is not None and math.isfinite(t) else None


def _observe_train(state: State, loss: float | None) -> None:
    """Keep a logged training loss's first and lowest values in ``state`` (in place)."""
    if loss is None or not math.isfinite(loss):
        return
    if state.get("train_first") is None:
        state["train_first"] = loss
    low = state.get("train_low")
    if low is None or loss < low:
        state["train_low"] = loss


def _overfit_said(e: dict[str, Any]) -> str:
    """Why a learning-rate schedule still to come held nothing back, in words (a clause ending in "; ")."""
    return (
        f"{e['train_key']} fell {e['train_fall_since_best']:.3g} since that best, at least "
        f"{e['overfit_share']:g} of its whole fall ({e['train_fall']:.3g}): the run overfits, which the "
        "learning rate's schedule still to come does not undo; "
    )
