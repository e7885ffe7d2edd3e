"""run.planned_steps and run.stop_rule

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stop_rule", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("planned_steps", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_column("planned_steps")
        batch_op.drop_column("stop_rule")
