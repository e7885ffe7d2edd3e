"""stored policies on the rebuilt default: ``degenerate`` is gone, ``outlook`` has new parameters

The default policy's rules were rebuilt: ``degenerate`` no longer exists, and ``outlook`` takes new
parameters (its old ones, ``min_evaluations``, ``learned_spread``, ``blind_min_progress`` and the rest, are
refused). A run stored with the old rules would fail validation on every read and every batch. This revision
rewrites each such policy: ``degenerate`` is dropped, and an ``outlook`` with any parameter the new one does
not take becomes the new ``outlook`` with its defaults, keeping the series it read (``lr_key``,
``loss_key``, ``train_key``) and ``ema``.

The rules' stored states follow their rules to their new places. A run that has states already (it was being
judged) gets the new ``outlook`` as a rule that has spoken: its holds and verdicts read a run from its first
evaluation, which a run half-way through cannot give it, so such a run goes on to its end under its
remaining rules (the safety rules, the best checkpoint, cross-run pruning) rather than be judged from a
mid-run value as if it were untrained. Runs started after the upgrade get the whole default.

The names and the initial state here are frozen copies of the code at this revision, not imports: a
migration must not change when the code does.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_OUTLOOK_PARAMS = {
    *("rule", "ema", "relative_delta", "min_progress", "blind_progress", "final_share", "lr_key"),
    *("lr_fraction", "loss_key", "train_key", "retreat", "collapse", "noise", "window", "settle", "hold"),
    *("rising_t", "fallback_patience", "fallback_delta"),
}
_KEPT = ("ema", "lr_key", "loss_key", "train_key")
_OUTLOOK_START = {"n": 0, "recent": [], "path": [], "evidence": 0, "since_best": 0, "wait": 0}


def _new_rule(rule: Any) -> dict[str, Any] | None:
    """The rule as the new code takes it; None for one that no longer exists."""
    if not isinstance(rule, dict):
        return rule  # type: ignore[no-any-return]  # left as it is: validation names it
    if rule.get("rule") == "degenerate":
        return None
    if rule.get("rule") == "outlook" and not set(rule) <= _OUTLOOK_PARAMS:
        return {"rule": "outlook", **{key: rule[key] for key in _KEPT if rule.get(key) is not None}}
    return rule


def upgrade() -> None:
    run = sa.table("run", sa.column("id", sa.Integer), sa.column("policy", sa.JSON))
    state = sa.table(
        "rule_state",
        sa.column("run_id", sa.Integer),
        sa.column("rule_index", sa.Integer),
        sa.column("rule", sa.String),
        sa.column("state", sa.JSON),
        sa.column("last_step", sa.BigInteger),
    )
    connection = op.get_bind()
    rows = connection.execute(sa.select(run.c.id, run.c.policy).where(run.c.policy.is_not(None))).all()
    for run_id, policy in rows:
        if not isinstance(policy, dict) or not isinstance(policy.get("rules"), list):
            continue
        moved = [(index, _new_rule(rule)) for index, rule in enumerate(policy["rules"])]
        rules = [rule for _, rule in moved if rule is not None]
        if rules == policy["rules"]:
            continue
        connection.execute(run.update().where(run.c.id == run_id).values(policy={**policy, "rules": rules}))
        stored = {
            index: (body, last)
            for index, body, last in connection.execute(
                sa.select(state.c.rule_index, state.c.state, state.c.last_step).where(
                    state.c.run_id == run_id
                )
            ).all()
        }
        if not stored:
            continue
        connection.execute(state.delete().where(state.c.run_id == run_id))
        if set(stored) != set(range(len(policy["rules"]))):
            continue  # states that never matched their rules: the run starts its rules afresh
        last_step = max(last for _, last in stored.values())
        new_index = 0
        for index, rule in moved:
            if rule is None:
                continue
            old = policy["rules"][index]
            if rule is not old:  # an outlook rebuilt: it has spoken for this run
                body = {"s": dict(_OUTLOOK_START), "ema": None, "vote": None, "stopped": True}
                last = last_step
            else:
                body, last = stored[index]
            connection.execute(
                state.insert().values(
                    run_id=run_id, rule_index=new_index, rule=rule["rule"], state=body, last_step=last
                )
            )
            new_index += 1


def downgrade() -> None:
    pass  # the old rules are gone from the code: nothing could read them back
