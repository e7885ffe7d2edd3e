"""The SDK judges the basic rules itself while the tracker has not judged the step the loop asks about (the
tracker away, or slower than the loop's bound); the loop then saves and stops on the SDK's word. Once the
tracker has judged those steps, the SDK tells it what it said, and a step the two judged differently is
said as an ``sdk_disagreed`` alert: the checkpoint the loop kept, or the step it left at, is not the
tracker's (the I/O: :mod:`plateau_tracker.server.services.away_verdicts`).
"""

from __future__ import annotations

from plateau_tracker.server.policy._types import Verdict

SDK_DISAGREED = "sdk_disagreed"


_CLAUSES = {
    ("checkpoint", True): "the loop saved a checkpoint the tracker did not make",
    ("checkpoint", False): "the loop did not save the checkpoint the tracker made",
    ("stop", True): "the loop stopped where the tracker goes on",
    ("stop", False): "the loop went on where the tracker stopped",
}


def sdk_disagreed_alert(
    step: int,
    *,
    sdk_checkpoint: bool | None,
    sdk_stop: bool | None,
    tracker_checkpoint: bool,
    tracker_stop_rule: str | None,
) -> Verdict | None:
    """The alert for ``step`` where the SDK's answer (None: the loop did not ask that question) differs
    from the tracker's decisions at that step (a checkpoint; a stop, by its rule); None where they agree."""
    differ = []
    if sdk_checkpoint is not None and sdk_checkpoint != tracker_checkpoint:
        differ.append(("checkpoint", sdk_checkpoint))
    tracker_stop = tracker_stop_rule is not None
    if sdk_stop is not None and sdk_stop != tracker_stop:
        differ.append(("stop", sdk_stop))
    if not differ:
        return None
    clauses = [_CLAUSES[action, yes] for action, yes in differ]
    if tracker_stop_rule is not None and sdk_stop is False:
        clauses[-1] += f" ({tracker_stop_rule})"
    return Verdict(
        action="alert",
        rule=SDK_DISAGREED,
        step=step,
        reason=f"the SDK and the tracker judged step {step} differently: {'; '.join(clauses)}",
        evidence={
            "step": step,
            "sdk": {"checkpoint": sdk_checkpoint, "stop": sdk_stop},
            "tracker": {
                "checkpoint": tracker_checkpoint,
                "stop": tracker_stop,
                "stop_rule": tracker_stop_rule,
            },
        },
    )
