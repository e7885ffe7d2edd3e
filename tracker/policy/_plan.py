"""A run whose monitored steps pass its planned end (``planned_steps``): said once, as an ``alert``.

The engine stops reading a plan the run has passed (:func:`plateau_tracker.server.policy.evaluate` judges it
from there as a run with no plan), which keeps a run whose plan was given in epochs while it logs batches from
being stopped as "no time left" while it climbs. The user should still hear of it: the rules that read the
plan (``outlook``'s pace to the end, its floor and its blind hold) judged the run
against a plan that was not its own until then.
"""

from __future__ import annotations

from plateau_tracker.server.policy._types import Verdict

RULE = "plan_passed"


def plan_passed_alert(monitor: str, step: int, planned_steps: int) -> Verdict:
    """The alert at ``step``, the first monitored step past ``planned_steps``."""
    return Verdict(
        action="alert",
        rule=RULE,
        step=step,
        reason=(
            f"{monitor} was logged at step {step}, past the run's planned end (planned_steps "
            f"{planned_steps}): from here the run is judged as one with no plan. If the run was meant to "
            f"end there, planned_steps was given in another unit than the steps logged (epochs against "
            f"batches?): give it as the last step the run will log"
        ),
        evidence={"monitor": monitor, "step": step, "planned_steps": planned_steps},
    )
