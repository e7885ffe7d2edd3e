"""Rules by name, and the discriminated union that validates a policy's rule list."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from plateau_tracker.server.policy._base import Rule, RuleParams
from plateau_tracker.server.policy._types import Mode
from plateau_tracker.server.policy.rules._budget import Budget, BudgetParams
from plateau_tracker.server.policy.rules._checkpoint import Checkpoint, CheckpointParams
from plateau_tracker.server.policy.rules._distributed import (
    Staleness,
    StalenessParams,
    Straggler,
    StragglerParams,
)
from plateau_tracker.server.policy.rules._divergence import Divergence, DivergenceParams
from plateau_tracker.server.policy.rules._forecast import Forecast, ForecastParams
from plateau_tracker.server.policy.rules._no_progress import NoProgress, NoProgressParams
from plateau_tracker.server.policy.rules._non_finite import NonFinite, NonFiniteParams
from plateau_tracker.server.policy.rules._outlook import Outlook, OutlookParams
from plateau_tracker.server.policy.rules._overfitting import Overfitting, OverfittingParams
from plateau_tracker.server.policy.rules._patience import Patience, PatienceParams
from plateau_tracker.server.policy.rules._perfect import Perfect, PerfectParams
from plateau_tracker.server.policy.rules._plateau import Plateau, PlateauParams
from plateau_tracker.server.policy.rules._prechelt import Prechelt, PrecheltParams
from plateau_tracker.server.policy.rules._pruning import Asha, AshaParams, Percentile, PercentileParams
from plateau_tracker.server.policy.rules._threshold import Threshold, ThresholdParams

RULES: dict[str, type[Rule[Any]]] = {
    rule.name: rule
    for rule in (
        Patience,
        Checkpoint,
        NonFinite,
        Plateau,
        Threshold,
        Divergence,
        Budget,
        Prechelt,
        Overfitting,
        NoProgress,
        Forecast,
        Outlook,
        Percentile,
        Asha,
        Perfect,
        Straggler,
        Staleness,
    )
}

# Validation picks the parameter model by the "rule" field, so errors name e.g. rules.0.patience.patience.
RuleSpec = Annotated[
    PatienceParams
    | CheckpointParams
    | NonFiniteParams
    | PlateauParams
    | ThresholdParams
    | DivergenceParams
    | BudgetParams
    | PrecheltParams
    | OverfittingParams
    | NoProgressParams
    | ForecastParams
    | OutlookParams
    | PercentileParams
    | AshaParams
    | PerfectParams
    | StragglerParams
    | StalenessParams,
    Field(discriminator="rule"),
]


def build_rule(params: RuleParams, *, monitor: str, mode: Mode) -> Rule[Any]:
    """The rule object for validated ``params``."""
    name: str = getattr(params, "rule")  # noqa: B009 - every concrete RuleParams has it
    return RULES[name](params, monitor=monitor, mode=mode)
