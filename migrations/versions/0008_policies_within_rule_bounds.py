"""stored policies within the rules' bounds: every numeric rule parameter now has two ends

Policies stored before the bounds could hold values the tracker now refuses (an ``asha`` factor of
1 + 2**-52 looped for ever; a ``mann_kendall`` window of 1,000 cost 0.3 s a point). Such a stored policy
would fail validation on every read and every batch of its run. This revision brings each such value to
the nearest legal one, so every stored run stays readable and judged. The values here are frozen copies of
the bounds at this revision (``tracker/policy/_base.py``), not imports: a migration must not change when
the code does.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_MAX_STEP = 2**62
_MAX_RATIO = 1e9
_COUNTS = {
    "patience",
    "warmup",
    "warmup_steps",
    "warmup_evaluations",
    "n_startup_runs",
    "min_runs_at_step",
    "min_step",
    "max_step",
    "max_steps",
    "planned_steps",
    "reports",
}
_RATIOS = {"noise_factor", "factor", "run_factor", "max_wall_seconds", "reduction_factor"}


def _within(rule: dict[str, Any]) -> dict[str, Any]:
    fixed = dict(rule)
    for name, value in rule.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if name in _COUNTS and value > _MAX_STEP:
            fixed[name] = _MAX_STEP
        elif name in _RATIOS and value > _MAX_RATIO:
            fixed[name] = _MAX_RATIO
    kind = rule.get("rule")
    if kind == "asha" and isinstance(rule.get("reduction_factor"), (int, float)):
        fixed["reduction_factor"] = max(1.01, fixed["reduction_factor"])
    if kind == "prechelt" and isinstance(rule.get("alpha"), (int, float)):
        fixed["alpha"] = min(_MAX_RATIO, fixed["alpha"])
    if kind == "staleness" and isinstance(rule.get("bound"), (int, float)):
        fixed["bound"] = min(_MAX_RATIO, fixed["bound"])
    if kind == "plateau" and rule.get("test") == "mann_kendall" and isinstance(rule.get("window"), int):
        fixed["window"] = min(200, fixed["window"])
    return fixed


def upgrade() -> None:
    run = sa.table("run", sa.column("id", sa.Integer), sa.column("policy", sa.JSON))
    connection = op.get_bind()
    rows = connection.execute(sa.select(run.c.id, run.c.policy).where(run.c.policy.is_not(None))).all()
    for run_id, policy in rows:
        if not isinstance(policy, dict) or not isinstance(policy.get("rules"), list):
            continue
        rules = [_within(rule) if isinstance(rule, dict) else rule for rule in policy["rules"]]
        if rules != policy["rules"]:
            connection.execute(
                run.update().where(run.c.id == run_id).values(policy={**policy, "rules": rules})
            )


def downgrade() -> None:
    pass  # the old values were the ones that broke reads; nothing to restore
