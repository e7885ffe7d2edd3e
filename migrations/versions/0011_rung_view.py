"""rung_view, rung_value: every run's value at its first point at or after an ``asha`` rung

An ``asha`` judgement read, for every other run of the experiment, its first block reaching the rung and
decoded it: 47.8 ms a judgement at 10,000 runs against 3.3 ms at 100. These tables keep, per experiment,
monitored key and rung step, each run's value there as an index row, kept up to date as points arrive, so
the cut at a rung is read from an index.

A rung's view is built on the first judgement that needs it; nothing is backfilled here.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def _foreign_keys(table: str, *columns: str) -> list[sa.schema.SchemaItem]:
    targets = {
        "experiment_id": ("experiment", "CASCADE"),
        "key_id": ("metric_key", None),
        "run_id": ("run", "CASCADE"),
    }
    items: list[sa.schema.SchemaItem] = []
    for column in columns:
        target, ondelete = targets[column]
        items.append(
            sa.ForeignKeyConstraint(
                [column], [f"{target}.id"], name=op.f(f"fk_{table}_{column}_{target}"), ondelete=ondelete
            )
        )
    return items


def upgrade() -> None:
    op.create_table(
        "rung_view",
        sa.Column("experiment_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("key_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("rung_step", sa.BigInteger(), autoincrement=False, nullable=False),
        *_foreign_keys("rung_view", "experiment_id", "key_id"),
        sa.PrimaryKeyConstraint("experiment_id", "key_id", "rung_step", name=op.f("pk_rung_view")),
    )
    op.create_table(
        "rung_value",
        sa.Column("experiment_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("run_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("key_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("rung_step", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("at_step", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        *_foreign_keys("rung_value", "experiment_id", "run_id", "key_id"),
        sa.PrimaryKeyConstraint("experiment_id", "run_id", "key_id", "rung_step", name=op.f("pk_rung_value")),
        sqlite_with_rowid=False,
    )
    op.create_index(
        "ix_rung_value_rung", "rung_value", ["experiment_id", "key_id", "rung_step", "value", "run_id"]
    )


def downgrade() -> None:
    op.drop_index("ix_rung_value_rung", table_name="rung_value")
    op.drop_table("rung_value")
    op.drop_table("rung_view")
