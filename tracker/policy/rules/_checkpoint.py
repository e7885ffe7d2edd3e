"""``checkpoint``: tell the trainer to save the model whenever the monitored metric reaches a new best."""

from __future__ import annotations

from typing import Literal

from tracker.policy._base import ImprovementParams, Rule, State
from tracker.policy._improvement import ImprovementTest
from tracker.policy._types import Context, Observation, Verdict


class CheckpointParams(ImprovementParams):
    """Parameters of ``checkpoint``: the improvement test, as ``patience`` takes it (steps below ``warmup``
    never checkpoint). Rules whose tests are equal read one best kept by the engine, so with equal
    parameters the saved model is always the one a patience stop names as best."""

    rule: Literal["checkpoint"] = "checkpoint"


class Checkpoint(Rule[CheckpointParams]):
    """Emit ``checkpoint`` on each new best of the monitored metric.

    NaN and +-inf are never a new best. Steps below ``warmup`` are skipped. Ties as in ``patience``.
    """

    name = "checkpoint"
    stops = False
    quiet_on_plain_points = True

    def improvement_test(self) -> ImprovementTest:
        return self.params.improvement_test(self.mode)

    def initial_state(self) -> State:
        return {}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        seen = ctx.best
        if not seen.improved:  # the engine moved the best under this rule's test (margin, ties, warm-up)
            return state, None
        previous, previous_step = seen.previous, seen.previous_step
        # A new best and the best before it are finite (NaN and +-inf are never a best), so they are
        # formatted as fmt formats finite values, inline: this runs on every new best.
        if previous is None:
            reason = f"{self.monitor} first value {obs.value:.6g} at step {obs.step}: save it"
        else:
            reason = (
                f"{self.monitor} improved to {obs.value:.6g} at step {obs.step} "
                f"(previous best {previous:.6g} at step {previous_step}): save it"
            )
        # Positional: built by keyword, a Verdict took twice as long (about 1.1 against 0.5 us here), and
        # this runs on every new best.
        verdict = Verdict(
            "checkpoint",  # action
            self.name,  # rule
            obs.step,  # step
            reason,
            {  # evidence
                "monitor": self.monitor,
                "mode": self.mode,
                "value": obs.value,
                "previous_best": previous,
                "previous_best_step": previous_step,
            },
            obs.step,  # best_step
            obs.value,  # best_value
        )
        return state, verdict
