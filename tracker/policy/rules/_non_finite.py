"""``non_finite``: stop as soon as the monitored metric is NaN or +-inf."""

from __future__ import annotations

import math
from typing import Literal

from plateau_tracker.server.policy._base import Rule, RuleParams, State
from plateau_tracker.server.policy._types import Context, Observation, Verdict, fmt


class NonFiniteParams(RuleParams):
    """``non_finite`` takes no parameters."""

    rule: Literal["non_finite"] = "non_finite"


class NonFinite(Rule[NonFiniteParams]):
    """Stop on the first NaN, +inf or -inf of the monitored metric; there is no warm-up.

    It keeps the best finite value (strict improvement) so the decision names the network to keep.
    """

    name = "non_finite"
    guard = True
    judges_late = True
    quiet_on_plain_points = True

    def initial_state(self) -> State:
        return {}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        if math.isfinite(obs.value):
            return state, None
        best, best_step = ctx.best.value, ctx.best.step
        keep = f"; best {fmt(best)} at step {best_step}" if best is not None else ""
        verdict = self.stop(
            obs,
            reason=f"{self.monitor} is {fmt(obs.value)} at step {obs.step}{keep}",
            evidence={"monitor": self.monitor, "value": obs.value, "best": best, "best_step": best_step},
            best_step=best_step,
            best_value=best,
        )
        return state, verdict
