"""``outlook``: stop a run that has converged, left its best behind, or never learned; hold only on evidence.

One rule, four verdicts, each stated in ``tracker/policy/README.md`` in one sentence:

- **pace**: the best's gain over the last doubling of the run, kept up per doubling to the planned end,
  adds at most ``relative_delta`` of the progress the run has made;
- **retreat**: each of the last ``window`` values is worse than the best by more than ``retreat`` of the
  progress and ``noise`` times the step-to-step noise;
- **unlearned**: after ``hold`` evaluations the best is still within ``noise`` times the noise of the first
  value, and no validation loss has fallen beyond its own noise;
- **collapse**: each of the last ``window`` values has fallen back to within ``collapse`` of the progress
  of the first value (a model back at chance), whatever the schedule.

Pace and retreat wait while a *hold* stands: before ``min_progress`` of the plan, while a logged learning
rate warms up or is above ``lr_fraction`` of its peak once it decays, before ``blind_progress`` of the plan
for a run that logs neither a rate nor a validation loss. Those holds stand only while the run shows
evidence of learning within its last ``hold`` evaluations: a new best of the watched metric or of the
validation loss beyond ``noise`` times its noise, or the watched metric's last values rising toward the best
by ``rising_t`` standard errors. A validation loss at a new best within the last ``settle`` evaluations, and a
significant rise, hold on their own (they are the evidence).

A run with neither a plan nor a validation loss is judged by patience alone: ``fallback_patience``
evaluations without beating the best by ``fallback_delta`` of its size.

Progress is counted past the first evaluation's drop: from the better of the first two values, since any
model makes the first drop (a boosted model's first rounds leave the constant predictor).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from plateau_tracker.server.policy._base import MAX_STEP, Rule, RuleParams, State
from plateau_tracker.server.policy._keys import MetricNames, Names
from plateau_tracker.server.policy._stats import ols, step_noise
from plateau_tracker.server.policy._types import Context, Observation, Verdict, fmt
from plateau_tracker.server.policy.rules._loss_names import (
    best_at_half,
    keep_best,
    loss_names,
    train_loss_names,
)

_RECENT = 16  # values the noise and the retreat are read from
_RISE = 8  # values the rising test fits


class OutlookParams(RuleParams):
    """Parameters of ``outlook`` (module docstring: what each verdict and hold does)."""

    rule: Literal["outlook"] = "outlook"
    relative_delta: float = Field(default=0.015, gt=0.0, le=1.0)
    min_progress: float = Field(default=0.25, ge=0.0, le=1.0)
    blind_progress: float = Field(default=0.5, ge=0.0, le=1.0)
    final_share: float = Field(default=0.1, ge=0.0, le=1.0)
    lr_key: MetricNames | None = None
    lr_fraction: float = Field(default=0.3, ge=0.0, le=1.0)
    loss_key: MetricNames | None = None
    train_key: MetricNames | None = None
    retreat: float = Field(default=0.05, ge=0.0, le=1.0)
    collapse: float = Field(default=0.1, ge=0.0, le=1.0)
    noise: float = Field(default=2.0, ge=0.0, le=1e3)
    window: int = Field(default=6, ge=1, le=_RECENT)
    settle: int = Field(default=3, ge=1, le=MAX_STEP)
    hold: int = Field(default=12, ge=1, le=MAX_STEP)
    rising_t: float = Field(default=2.0, gt=0.0, le=1e3)
    fallback_patience: int | None = Field(default=10, ge=1, le=MAX_STEP)
    fallback_delta: float = Field(default=0.001, ge=0.0, le=1.0)


class Outlook(Rule[OutlookParams]):
    """Stop when the run has converged (pace), left its best (retreat), never learned, or collapsed."""

    name = "outlook"

    def __init__(self, params: OutlookParams, *, monitor: str, mode: Any) -> None:
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
        recent = state["recent"]
        recent.append(y)
        if len(recent) > _RECENT:
            del recent[0]
        sigma = step_noise(recent)
        p = self.params
        if n == 1:
            state["first"] = state["ref"] = state["best"] = y
            state["best_step"] = obs.step
            keep_best(state["path"], obs.step, y)
        else:
            if n == 2:
                state["ref"] = max(state["ref"], y)
            if y > state["best"]:
                if y - state["best"] > p.noise * sigma:
                    state["evidence"] = n
                state["best"], state["best_step"], state["since_best"] = y, obs.step, 0
                keep_best(state["path"], obs.step, y)
            else:
                state["since_best"] += 1
        loss_new_best = self._observe_loss(state, obs, n)
        self._observe_train(state, obs)
        lr_guard = self._observe_lr(state, obs)
        rising = self._rising(state, recent)
        if rising:
            state["evidence"] = n
        planned = ctx.planned_steps
        if planned is None and "loss_first" not in state and p.fallback_patience is not None:
            return state, self._fallback(state, obs, y)
        return state, self._judge(state, obs, n, sigma, planned, lr_guard, loss_new_best, rising)

    def _judge(
        self,
        state: State,
        obs: Observation,
        n: int,
        sigma: float,
        planned: int | None,
        lr_guard: bool,
        loss_new_best: bool,
        rising: bool,
    ) -> Verdict | None:
        p = self.params
        if n < 3:
            return None
        first, best, recent = state["first"], state["best"], state["recent"]
        learned = best - first
        bar = p.noise * sigma
        last = recent[-p.window :]
        at_start = len(last) == p.window and sum(last) / p.window - first <= max(p.collapse * learned, bar)
        if n >= p.hold and at_start and not rising and self._losses_at_chance(state):
            return self._verdict(state, obs, "chance", sigma, planned)
        progress = best - state["ref"]
        if rising or (loss_new_best and n - state["loss_best_at"] < p.settle):
            return None
        fraction = obs.step / planned if planned else None
        blind = not state.get("lr_seen") and "loss_first" not in state
        scheduled = lr_guard or (
            fraction is not None and (fraction < p.min_progress or (blind and fraction < p.blind_progress))
        )
        if scheduled and n - state["evidence"] < p.hold:
            return None
        if len(last) == p.window and all(best - v > max(p.retreat * progress, bar) for v in last):
            return self._verdict(state, obs, "retreat", sigma, planned)
        if state["since_best"] < p.settle:
            return None
        if fraction is not None and fraction > 1.0 - p.final_share:
            return None
        if (not planned and "loss_first" not in state) or learned <= bar:
            return None
        earlier = best_at_half(state["path"], obs.step)
        gain = best - (first if earlier is None else earlier)
        doublings = math.log2(planned / obs.step) if planned and planned > obs.step else 1.0
        if gain * doublings > p.relative_delta * progress:
            return None
        state["pace"] = [gain, doublings, progress]
        return self._verdict(state, obs, "pace", sigma, planned)

    def _observe_loss(self, state: State, obs: Observation, n: int) -> bool:
        """Track the validation loss; True when it set a new lowest at ``obs``."""
        loss = self._loss.read(obs.extras) if self._loss else None
        if loss is None or not math.isfinite(loss) or self._loss.read_name(obs.extras) in obs.stale:
            return False
        recent = state.setdefault("loss_recent", [])
        recent.append(loss)
        if len(recent) > _RECENT:
            del recent[0]
        if "loss_first" not in state:
            state["loss_first"] = state["loss_best"] = loss
            state["loss_best_at"] = n
            return False
        if loss >= state["loss_best"]:
            return False
        beyond = state["loss_best"] - loss > self.params.noise * step_noise(recent)
        state["loss_best"], state["loss_best_at"] = loss, n
        if beyond:
            state["evidence"] = n
        return beyond

    def _observe_train(self, state: State, obs: Observation) -> None:
        """Track the training loss: its first, lowest and latest values."""
        loss = self._train.read(obs.extras) if self._train else None
        if loss is None or not math.isfinite(loss):
            return
        recent = state.setdefault("train_recent", [])
        recent.append(loss)
        if len(recent) > _RECENT:
            del recent[0]
        if "train_first" not in state:
            state["train_first"] = state["train_best"] = loss
            return
        state["train_best"] = min(state["train_best"], loss)

    def _losses_at_chance(self, state: State) -> bool:
        """Whether each logged loss (validation, training) is back, over its last ``window`` values on
        average, within ``collapse`` of its fall of its first value, where an untrained model has it (true
        when none is logged: the watched metric then says it alone)."""
        for key in ("loss", "train"):
            if f"{key}_first" in state:
                first, lowest = state[f"{key}_first"], state[f"{key}_best"]
                last = state[f"{key}_recent"][-self.params.window :]
                if sum(last) / len(last) < first - self.params.collapse * (first - lowest):
                    return False
        return True

    def _observe_lr(self, state: State, obs: Observation) -> bool:
        """Track the learning rate; True while it warms up, or has decayed but stays above ``lr_fraction``
        of its peak (a schedule still to anneal)."""
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

    def _rising(self, state: State, recent: list[float]) -> bool:
        """Whether the last values climb toward the best by ``rising_t`` standard errors of their slope."""
        ys = recent[-_RISE:]
        if len(ys) < _RISE:
            return False
        xs = list(range(len(ys)))
        slope, _, residuals = ols(xs, ys)
        if slope <= 0.0:
            return False
        sxx = sum((x - 3.5) ** 2 for x in xs)
        se = math.sqrt(sum(r * r for r in residuals) / (len(ys) - 2) / sxx)
        return se == 0.0 or slope / se >= self.params.rising_t

    def _fallback(self, state: State, obs: Observation, y: float) -> Verdict | None:
        """Patience with a relative margin, for a run that gives neither a plan nor a validation loss."""
        p = self.params
        assert p.fallback_patience is not None
        bar = state.get("fb_best")
        if bar is None or y > bar + p.fallback_delta * abs(bar):
            state["fb_best"], state["fb_step"], state["wait"] = y, obs.step, 0
            return None
        state["wait"] += 1
        if state["wait"] < p.fallback_patience:
            return None
        value = self._sign * state["best"]
        return self.stop(
            obs,
            reason=(
                f"{self.monitor} has not beaten {fmt(self._sign * bar)} (step {state['fb_step']}) by "
                f"{p.fallback_delta:g} of its size for {state['wait']} evaluations (no plan and no "
                f"validation loss: patience {p.fallback_patience})"
            ),
            headline=f"{self.monitor} stopped improving",
            evidence={"verdict": "patience", "wait": state["wait"], "patience": p.fallback_patience},
            best_step=state["best_step"],
            best_value=value,
        )

    def _verdict(
        self, state: State, obs: Observation, kind: str, sigma: float, planned: int | None
    ) -> Verdict:
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
        m = self.monitor
        if kind == "pace":
            gain, doublings, progress = state.pop("pace")
            evidence.update(gain=gain, doublings_left=doublings, bar=self.params.relative_delta * progress)
            headline = f"{m} has converged: what is left to gain is too little to matter"
            reason = (
                f"{m} gained {gain:.3g} on its best over the last doubling of the run; kept up for "
                f"{doublings:.2f} doublings that adds at most {gain * doublings:.3g}, within "
                f"{self.params.relative_delta:g} of its progress {progress:.3g}"
            )
        elif kind == "retreat":
            headline = f"{m} has left its best behind"
            reason = (
                f"each of {m}'s last {self.params.window} values is worse than its best {fmt(value)} (step "
                f"{state['best_step']}) by more than {self.params.retreat:g} of its progress and "
                f"{self.params.noise:g} times its noise {sigma:.3g}"
            )
        else:
            headline = f"{m} is at chance: the model predicts no better than it did untrained"
            reason = (
                f"the mean of {m}'s last {self.params.window} values is within {self.params.collapse:g} of "
                f"its progress (best {fmt(value)}), or {self.params.noise:g} times its noise {sigma:.3g}, of "
                f"its first value {fmt(self._sign * first)}, and every loss logged beside it is back where "
                f"it started"
            )
        return self.stop(
            obs,
            reason=reason,
            headline=headline,
            evidence=evidence,
            best_step=state["best_step"],
            best_value=value,
        )
