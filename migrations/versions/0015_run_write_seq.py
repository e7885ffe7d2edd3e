"""run.write_seq: how many batches have changed the run, so a worker knows whether what it remembers of
the run (its rules' states, the tails of its series) is still what the database holds

Every applied batch adds one, in the statement that writes the run's progress. A worker that remembers a
run at one count and finds another under the run's lock (another worker or replica wrote since) reads the
run afresh.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("run", sa.Column("write_seq", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    # In place (SQLite 3.35 and later drop a column without copying the table): a batch operation copies
    # the run table and drops the original, and the drop cascades to every row that refers to a run.
    op.execute("ALTER TABLE run DROP COLUMN write_seq")
