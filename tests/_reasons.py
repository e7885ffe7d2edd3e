"""A stop's full sentence, for tests that read its figures: where the reason is a headline (``outlook``,
``degenerate`` and other rules whose sentence is figures), the sentence is the evidence's ``detail``."""

from __future__ import annotations

from typing import Any

from plateau_tracker.server.policy._types import Verdict


def detail(decision: Verdict | dict[str, Any]) -> str:
    """The full sentence of ``decision``: a verdict, or a decision as the API answers it."""
    if isinstance(decision, Verdict):
        said: str = decision.evidence.get("detail", decision.reason)
        return said
    return str((decision.get("evidence") or {}).get("detail", decision["reason"]))
