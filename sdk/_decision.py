"""The tracker's verdict as the SDK hands it to a training loop."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from plateau_tracker._numbers import number


@dataclass(frozen=True)
class Decision:
    """``action`` is ``continue``, ``checkpoint`` or ``stop``; ``step`` the step it is about; ``best_step``
    the step whose model to keep; ``reason`` a sentence; ``evidence`` the numbers behind it.

    ``judged`` is false when :meth:`Run.decision` gave up waiting before the tracker judged the step.
    """

    seq: int = 0
    action: str = "continue"
    step: int | None = None
    best_step: int | None = None
    best_value: float | None = None
    rule: str | None = None
    reason: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    judged: bool = True

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Decision:
        return cls(
            seq=int(data.get("seq", 0)),
            action=str(data.get("action", "continue")),
            step=data.get("step"),
            best_step=data.get("best_step"),
            best_value=number(data.get("best_value")),
            rule=data.get("rule"),
            reason=str(data.get("reason", "")),
            evidence=dict(data.get("evidence") or {}),
            judged=bool(data.get("judged", True)),
        )

    @property
    def stop(self) -> bool:
        return self.action == "stop"

    @property
    def checkpoint(self) -> bool:
        return self.action == "checkpoint"


CONTINUE = Decision()


@dataclass(frozen=True)
class Answer:
    """The tracker's answer to a batch of points: the run's latest decision, the newest step of the
    monitored metric it has judged (None: none yet), and the decisions this batch made, oldest first."""

    decision: Decision
    judged_step: int | None = None
    decisions: tuple[Decision, ...] = ()
    accepted: int = 0  # new points stored (a replayed batch, or points at steps already logged, add none)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Answer:
        judged = data.get("judged_step")
        return cls(
            decision=Decision.from_json(data["decision"]),
            judged_step=int(judged) if judged is not None else None,
            decisions=tuple(Decision.from_json(d) for d in data.get("decisions") or ()),
            accepted=int(data.get("accepted") or 0),
        )
