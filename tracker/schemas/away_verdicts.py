"""What the SDK answered alone for steps the tracker had not judged yet, and the tracker's comparison."""

from __future__ import annotations

from pydantic import Field, StrictBool

from plateau_tracker.server.schemas._common import Schema
from plateau_tracker.server.schemas.metrics import Step

MAX_AWAY_VERDICTS = 10_000


class AwayVerdict(Schema):
    """The SDK's answer at ``step``: whether the loop was told to save (``checkpoint``) and to stop
    (``stop``); ``null`` where the loop did not ask that question at that step."""

    step: Step
    checkpoint: StrictBool | None = None
    stop: StrictBool | None = None


class AwayVerdicts(Schema):
    """The SDK's answers for steps it judged while the tracker had not (away, or slower than the loop's
    bound), sent once the tracker has judged them."""

    verdicts: list[AwayVerdict] = Field(min_length=1, max_length=MAX_AWAY_VERDICTS)


class AwayComparison(Schema):
    """``compared``: steps compared with the tracker's decisions (steps past the run's stop are not: the
    alert at the stop says the loop went on); ``disagreed``: the steps judged
    differently, each now an ``sdk_disagreed`` alert on the run (said once a step); ``not_judged``: steps the
    tracker has not judged yet, not compared (send them again once it has)."""

    compared: int
    disagreed: list[int]
    not_judged: list[int]
