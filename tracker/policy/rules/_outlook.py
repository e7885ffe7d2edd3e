"""``outlook``: stop a run that has converged, left its best behind, or sits at chance; hold only on evidence.

Values are read as "higher is better" (a metric in mode min is negated). With ``n`` evaluations so far, the
*first* value, the *best*, the step-to-step *noise* of the last 16 values (``noise`` times it is the *bar*)
and the *progress* counted past the first evaluation's drop (best minus the better of the first two values:
any model makes the first drop), the rule says stop on one of three verdicts:

- **chance**: from ``hold`` evaluations on, the mean of the last ``window`` values is within ``collapse`` of
  the run's gain (best minus first), or within the bar, of the first value, and every loss logged beside it
  (validation, training) is back, on average over its last ``window`` values, within ``collapse`` of its
  fall of its first value: the model predicts as it did untrained. No hold delays it.
- **retreat**: each of the last ``window`` values is worse than the best by more than the bar (and by more
  than ``retreat`` of the progress, 0 by default): the run has left its best behind.
- **pace**: ``settle`` evaluations without a new best, and the best's gain over the last doubling of the
  run (best now against best at half the steps), kept up per doubling to the planned end (one doubling
  with no plan), adds at most ``relative_delta`` of the progress. Not in the last ``final_share`` of the
  plan (what is left to save there is small, and a late climb is not), and not before the run has gained
  more than the bar on its first value.

Retreat and pace wait while the run shows a sign that it is still learning (a validation loss at a new low
by more than its own bar, or the last 8 values rising toward the best by ``rising_t`` standard errors of
their slope), and while a *hold* stands: before ``min_progress`` of the plan; before ``blind_progress`` of
it for a run that logs neither a learning rate nor a validation loss; while a logged learning rate rises,
or has begun to decay but is still above ``lr_fraction`` of its peak. A hold stands only while the run has
shown evidence of learning within its last ``hold`` evaluations (a new best of the watched metric by more
than the bar, a validation loss at a new low by more than its bar, or a rise as above), and during its
first ``hold`` evaluations.

A run with neither a plan nor a validation loss is judged by patience alone: ``fallback_patience``
evaluations without beating the best by ``fallback_delta`` of its size.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from plateau_tracker.server.policy._base import MAX_STEP, Rule, RuleParams, State
from plateau_tracker.server.policy._keys import MetricNames, Names
from plateau_tracker.server.policy._stats import ols, step_noise
from plateau_tracker.server.policy._types import Context, Mode, Observation, Verdict, fmt
from plateau_tracker.server.policy.rules._best_path import best_at_half, keep_best
from plateau_tracker.server.policy.rules._loss_names import loss_names, train_loss_names

_RECENT = 16  # the latest values the noise, the chance test and the retreat read
_RISE = 8  # the latest values the rising test fits
# The alert a run gets once where the blind hold first holds it back: only the trainer can log what would
# let it be judged earlier.
BLIND_ALERT = "blind"


class OutlookParams(RuleParams):
    """Parameters of ``outlook``; the module docstring says what each does."""

    rule: Literal["outlook"] = "outlook"
    relative_delta: float = Field(default=0.03, gt=0.0, le=1.0)
    min_progress: float = Field(default=0.25, ge=0.0, le=1.0)
    blind_progress: float = Field(default=0.5, ge=0.0, le=1.0)
    final_share: float = Field(default=0.1, ge=0.0, le=1.0)
    lr_key: MetricNames | None = None
    lr_fraction: float = Field(default=0.3, ge=0.0, le=1.0)
    loss_key: MetricNames | None = None
    train_key: MetricNames | None = None
    retreat: float = Field(default=0.0, ge=0.0, le=1.0)
    collapse: float = Field(default=0.1, ge=0.0, le=1.0)
    noise: float = Field(default=2.0, ge=0.0, le=1e3)
    window: int = Field(default=4, ge=1, le=_RECENT)
    settle: int = Field(default=3, ge=1, le=MAX_STEP)
    hold: int = Field(default=12, ge=1, le=MAX_STEP)
    rising_t: float = Field(default=2.0, gt=0.0, le=1e3)
    fallback_patience: int | None = Field(default=10, ge=1, le=MAX_STEP)
    fallback_delta: float = Field(default=0.001, ge=0.0, le=1.0)


class Outlook(Rule[OutlookParams]):
    """Stop a run that has converged (pace), left its best (retreat) or sits at chance."""

    name = "outlook"

    def __init__(self, params: OutlookParams, *, monitor: str, mode: Mode) -> None:
        super().__init__(params, monitor=monitor, mode=mode)
        self._sign = 1.0 if mode == "max" else -1.0
        self._lr = Names.of(params.lr_key)
        self._loss = loss_names(params.loss_key, monitor, mode)
        self._train = train_loss_names(params.train_key, monitor)

    def required_keys(self) -> tuple[str, ...]:
        return (*self._lr.order, *self._loss.order, *self._train.order)

    def initial_state(self) -> State:
        return {"n": 0, "recent": [], "path": [], "evidence": 0, "since_best": 0, "wait": 0}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        if not math.isfinite(obs.value):
            return state, None
        y = self._sign * obs.value
        n = state["n"] = state["n"] + 1
        recent = _pushed(state, "recent", y)
        sigma = step_noise(recent)
        self._observe_best(state, obs.step, y, n, sigma)
        loss_fell = self._observe_loss(state, obs, n)
        self._observe_train(state, obs)
        lr_holds = self._observe_lr(state, obs)
        rising = self._rising(recent)
        if rising:
            state["evidence"] = n
        if ctx.planned_steps is None and "loss_first" not in state and self.params.fallback_patience:
            return state, self._fallback(state, obs, y, self.params.fallback_patience)
        if n < 3:
            return state, None
        if self._at_chance(state, sigma, rising):
            return state, self._verdict(state, obs, "chance", sigma, ctx.planned_steps)
        if rising or loss_fell:
            return state, None
        hold = self._hold(state, obs, ctx.planned_steps, lr_holds)
        if hold == BLIND_ALERT and not state.get("blind_said"):
            state["blind_said"] = True
            return state, self._blind_alert(obs, ctx.planned_steps or 0)
        if hold is not None:
            return state, None
        return state, self._retreat_or_pace(state, obs, sigma, ctx.planned_steps)

    def _observe_best(self, state: State, step: int, y: float, n: int, sigma: float) -> None:
        """Keep the first value, the reference progress is counted from, and the best with its path."""
        if n == 1:
            state["first"] = state["ref"] = state["best"] = y
            state["best_step"] = step
            keep_best(state["path"], step, y)
            return
        if n == 2:
            state["ref"] = max(state["ref"], y)
        if y > state["best"]:
            if _beyond(y - state["best"], self.params.noise * sigma):
                state["evidence"] = n
            state["best"], state["best_step"], state["since_best"] = y, step, 0
            keep_best(state["path"], step, y)
        else:
            state["since_best"] += 1

    def _observe_loss(self, state: State, obs: Observation, n: int) -> bool:
        """Track the validation loss; True when it fell to a new low by more than its own bar at ``obs``."""
        loss = self._loss.read(obs.extras) if self._loss else None
        if loss is None or not math.isfinite(loss) or self._loss.read_name(obs.extras) in obs.stale:
            return False
        recent = _pushed(state, "loss_recent", loss)
        if "loss_first" not in state:
            state["loss_first"] = state["loss_best"] = loss
            return False
        if loss >= state["loss_best"]:
            return False
        fell = _beyond(state["loss_best"] - loss, self.params.noise * step_noise(recent))
        state["loss_best"] = loss
        if fell:
            state["evidence"] = n
        return fell

    def _observe_train(self, state: State, obs: Observation) -> None:
        """Track the training loss: its first, lowest and latest values."""
        loss = self._train.read(obs.extras) if self._train else None
        if loss is None or not math.isfinite(loss):
            return
        _pushed(state, "train_recent", loss)
        if "train_first" not in state:
            state["train_first"] = state["train_best"] = loss
        state["train_best"] = min(state["train_best"], loss)

    def _observe_lr(self, state: State, obs: Observation) -> bool:
        """Track the learning rate; True while it rises, or has begun to decay but stays above
        ``lr_fraction`` of its peak (a schedule still to anneal). A rate flat at its peak holds nothing."""
        lr = self._lr.read(obs.extras) if self._lr else None
        if lr is None or not math.isfinite(lr):
            return False
        last = state.get("lr")
        peak = max(state.get("lr_peak", lr), lr)
        state["lr_seen"], state["lr"], state["lr_peak"] = True, lr, peak
        if last is not None and lr > last:
            return True
        if lr < peak:
            state["lr_fell"] = True
        return bool(state.get("lr_fell")) and lr > self.params.lr_fraction * peak

    def _rising(self, recent: list[float]) -> bool:
        """Whether the last 8 values climb by ``rising_t`` standard errors of their least-squares slope."""
        ys = recent[-_RISE:]
        if len(ys) < _RISE:
            return False
        xs = list(range(_RISE))
        slope, _, residuals = ols(xs, ys)
        if slope <= 0.0:
            return False
        centre = (_RISE - 1) / 2
        se = math.sqrt(sum(r * r for r in residuals) / (_RISE - 2) / sum((x - centre) ** 2 for x in xs))
        return se == 0.0 or slope / se >= self.params.rising_t

    def _at_chance(self, state: State, sigma: float, rising: bool) -> bool:
        """The ``chance`` verdict's test (module docstring)."""
        p = self.params
        last = state["recent"][-p.window :]
        if state["n"] < p.hold or len(last) < p.window or rising:
            return False
        first = state["first"]
        gained = state["best"] - first
        if _beyond(sum(last) / p.window - first, max(p.collapse * gained, p.noise * sigma)):
            return False
        for key in ("loss", "train"):
            if f"{key}_first" in state:
                start, lowest = state[f"{key}_first"], state[f"{key}_best"]
                losses = state[f"{key}_recent"][-p.window :]
                if _beyond(start - sum(losses) / len(losses), p.collapse * (start - lowest)):
                    return False
        return True

    def _hold(self, state: State, obs: Observation, planned: int | None, lr_holds: bool) -> str | None:
        """The hold that stands at ``obs``: ``blind`` (a run that logs neither a rate nor a validation loss,
        between ``min_progress`` and ``blind_progress`` of its plan), ``plan`` (before ``min_progress``),
        ``rate`` (its learning rate still to anneal); None when none stands or the run has shown no evidence
        of learning within its last ``hold`` evaluations."""
        p = self.params
        if state["n"] - state["evidence"] >= p.hold:
            return None
        fraction = obs.step / planned if planned else None
        blind = not state.get("lr_seen") and "loss_first" not in state
        if fraction is not None and fraction >= p.min_progress and blind and fraction < p.blind_progress:
            return BLIND_ALERT
        if lr_holds:
            return "rate"
        if fraction is not None and fraction < p.min_progress:
            return "plan"
        return None

    def _retreat_or_pace(
        self, state: State, obs: Observation, sigma: float, planned: int | None
    ) -> Verdict | None:
        p = self.params
        best, first = state["best"], state["first"]
        progress = best - state["ref"]
        bar = p.noise * sigma
        last = state["recent"][-p.window :]
        if len(last) == p.window and all(_beyond(best - v, max(p.retreat * progress, bar)) for v in last):
            return self._verdict(state, obs, "retreat", sigma, planned)
        if state["since_best"] < p.settle or not _beyond(best - first, bar):
            return None
        if planned and obs.step / planned > 1.0 - p.final_share:
            return None
        if not planned and "loss_first" not in state:
            return None
        earlier = best_at_half(state["path"], obs.step)
        gain = best - (first if earlier is None else earlier)
        doublings = math.log2(planned / obs.step) if planned and planned > obs.step else 1.0
        if _beyond(gain * doublings, p.relative_delta * progress):
            return None
        state["pace"] = [gain, doublings, progress]
        return self._verdict(state, obs, "pace", sigma, planned)

    def _fallback(self, state: State, obs: Observation, y: float, patience: int) -> Verdict | None:
        """Patience with a relative margin, for a run that gives neither a plan nor a validation loss."""
        p = self.params
        bar = state.get("fb_best")
        if bar is None or y > bar + p.fallback_delta * abs(bar):
            state["fb_best"], state["fb_step"], state["wait"] = y, obs.step, 0
            return None
        state["wait"] += 1
        if state["wait"] < patience:
            return None
        return self.stop(
            obs,
            reason=(
                f"{self.monitor} has not beaten {fmt(self._sign * bar)} (step {state['fb_step']}) by "
                f"{p.fallback_delta:g} of its size for {state['wait']} evaluations (the run has neither a "
                f"plan nor a validation loss, so it is judged by patience {patience})"
            ),
            headline=f"{self.monitor} stopped improving",
            evidence={"verdict": "patience", "wait": state["wait"], "patience": patience},
            best_step=state["best_step"],
            best_value=self._sign * state["best"],
        )

    def _blind_alert(self, obs: Observation, planned: int) -> Verdict:
        p = self.params
        lr_names, loss_names_ = ", ".join(self._lr.order[:2]), ", ".join(self._loss.order[:2])
        return Verdict(
            action="alert",
            rule=BLIND_ALERT,
            step=obs.step,
            reason=(
                f"neither a learning rate ({lr_names or 'lr_key unset'}) nor a validation loss "
                f"({loss_names_ or 'loss_key unset'}) has been logged with {self.monitor}: {self.name} "
                f"judges this run from {p.blind_progress:g} of its plan (step "
                f"{math.ceil(p.blind_progress * planned)}) while it still learns, not from "
                f"{p.min_progress:g} (step {math.ceil(p.min_progress * planned)}), as a schedule it cannot "
                "see may still lift the run late; log the rate (the SDK's run.watch_optimizer(optimizer) "
                f"does) or the validation loss in the same call as {self.monitor} to be judged earlier"
            ),
            evidence={
                "monitor": self.monitor,
                "step": obs.step,
                "planned_steps": planned,
                "blind_progress": p.blind_progress,
                "min_progress": p.min_progress,
                "lr_key": list(self._lr.order),
                "loss_key": list(self._loss.order),
            },
        )

    def _verdict(
        self, state: State, obs: Observation, kind: str, sigma: float, planned: int | None
    ) -> Verdict:
        p, m = self.params, self.monitor
        best, first = state["best"], state["first"]
        value = self._sign * best
        evidence: dict[str, Any] = {
            "verdict": kind,
            "best": value,
            "first": self._sign * first,
            "progress": best - state["ref"],
            "noise": sigma,
            "evaluations": state["n"],
            "planned_steps": planned,
        }
        if kind == "pace":
            gain, doublings, progress = state.pop("pace")
            evidence.update(gain=gain, doublings_left=doublings, bar=p.relative_delta * progress)
            headline = f"{m} has converged: what is left to gain is too little to matter"
            reason = (
                f"{m} gained {gain:.3g} on its best over the last doubling of the run; kept up for "
                f"{doublings:.2f} doublings that adds at most {gain * doublings:.3g}, within "
                f"{p.relative_delta:g} of its progress {progress:.3g}"
            )
        elif kind == "retreat":
            headline = f"{m} has left its best behind"
            reason = (
                f"each of {m}'s last {p.window} values is worse than its best {fmt(value)} (step "
                f"{state['best_step']}) by more than {p.retreat:g} of its progress and {p.noise:g} times "
                f"its noise {sigma:.3g}"
            )
        else:
            headline = f"{m} is at chance: the model predicts no better than it did untrained"
            reason = (
                f"the mean of {m}'s last {p.window} values is within {p.collapse:g} of its gain (best "
                f"{fmt(value)}), or {p.noise:g} times its noise {sigma:.3g}, of its first value "
                f"{fmt(self._sign * first)}, and every loss logged beside it is back where it started"
            )
        return self.stop(
            obs,
            reason=reason,
            headline=headline,
            evidence=evidence,
            best_step=state["best_step"],
            best_value=value,
        )


def _beyond(gain: float, bar: float) -> bool:
    """``gain > bar`` beyond float rounding: a tie in exact arithmetic (a retreat of exactly one step of a
    coarse metric against a bar of one step) reads the same in any units, a share or a percent."""
    return gain > bar + 1e-9 * (abs(gain) + abs(bar))


def _pushed(state: State, key: str, value: float) -> list[float]:
    """``state[key]`` (a list, made if missing) with ``value`` appended and only the latest 16 kept."""
    recent: list[float] = state.setdefault(key, [])
    recent.append(value)
    if len(recent) > _RECENT:
        del recent[0]
    return recent
