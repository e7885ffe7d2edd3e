"""The improvement test and the best so far, as the policy engine and its rules use them. They are defined
once, in the SDK (:mod:`plateau_tracker._improvement`), which judges with the same code while the tracker
is away."""

from __future__ import annotations

from plateau_tracker._improvement import Best, ImprovementTest, improves, is_tie, margin, needed

__all__ = ["Best", "ImprovementTest", "improves", "is_tie", "margin", "needed"]
