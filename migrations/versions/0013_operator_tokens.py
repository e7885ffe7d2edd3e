"""api_token: operator tokens, which belong to no project

An operator token reads every project (one dashboard for a team) and writes none: its ``project_id`` is
null and its scope ``operator``. Project tokens are unchanged.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_token", schema=None) as batch_op:
        batch_op.alter_column("project_id", existing_type=sa.Integer(), nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM api_token WHERE project_id IS NULL")
    with op.batch_alter_table("api_token", schema=None) as batch_op:
        batch_op.alter_column("project_id", existing_type=sa.Integer(), nullable=False)
