"""The policy engine: pure rules over the monitored metric, registered by name.

``evaluate(policy, states, observations, ctx) -> Evaluation`` is the whole interface; it reads no clock and
does no I/O, so rules are tested by tables and replayed over history.
"""

from __future__ import annotations

from plateau_tracker.server.policy._base import Rule, RuleParams, State
from plateau_tracker.server.policy._policy import (
    Evaluation,
    PolicySpec,
    default_rules,
    evaluate,
    evaluate_health,
    evaluate_late,
    evaluate_per_rank,
    initial_states,
)
from plateau_tracker.server.policy._registry import RULES, RuleSpec, build_rule
from plateau_tracker.server.policy._types import (
    Action,
    Cohort,
    Context,
    Mode,
    Observation,
    Ties,
    Verdict,
    cut_of,
    fmt,
)
from plateau_tracker.server.policy.rules._checkpoint import CheckpointParams
from plateau_tracker.server.policy.rules._non_finite import NonFiniteParams
from plateau_tracker.server.policy.rules._patience import PatienceParams
from plateau_tracker.server.policy.rules._pruning import PRUNING_RULES

__all__ = [
    "PRUNING_RULES",
    "RULES",
    "Action",
    "CheckpointParams",
    "Cohort",
    "Context",
    "Evaluation",
    "Mode",
    "NonFiniteParams",
    "Observation",
    "PatienceParams",
    "PolicySpec",
    "Rule",
    "RuleParams",
    "RuleSpec",
    "State",
    "Ties",
    "Verdict",
    "build_rule",
    "cut_of",
    "default_rules",
    "evaluate",
    "evaluate_health",
    "evaluate_late",
    "evaluate_per_rank",
    "fmt",
    "initial_states",
]
