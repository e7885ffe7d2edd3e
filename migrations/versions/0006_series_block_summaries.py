"""series_block: per-block summaries of each series, so long curves downsample without reading every point

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22
"""

from __future__ import annotations

import itertools

import sqlalchemy as sa
from alembic import op

from tracker.services._point_store import SUMMARY_COLUMNS, summarise

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "series_block",
        sa.Column("run_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("key_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("rank", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("block", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("points", sa.Integer(), nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("first_wall", sa.Float(), nullable=False),
        sa.Column("min_value", sa.Float(), nullable=True),
        sa.Column("min_step", sa.BigInteger(), nullable=True),
        sa.Column("min_wall", sa.Float(), nullable=True),
        sa.Column("max_value", sa.Float(), nullable=True),
        sa.Column("max_step", sa.BigInteger(), nullable=True),
        sa.Column("max_wall", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["key_id"], ["metric_key.id"], name=op.f("fk_series_block_key_id_metric_key")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_series_block_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "key_id", "rank", "block", name=op.f("pk_series_block")),
        sqlite_with_rowid=False,
    )
    _summarise_stored_points()


def _summarise_stored_points() -> None:
    """Summaries of the points stored before this revision, one series at a time, streamed in key order."""
    connection = op.get_bind()
    rows = connection.execute(
        sa.text(
            "SELECT run_id, key_id, rank, step, value, wall_time FROM metric_point "
            "ORDER BY run_id, key_id, rank, step"
        ).execution_options(yield_per=10_000)
    )
    insert = sa.text(
        "INSERT INTO series_block (run_id, key_id, rank, block, "
        + ", ".join(SUMMARY_COLUMNS)
        + ") VALUES (:run_id, :key_id, :rank, :block, "
        + ", ".join(f":{column}" for column in SUMMARY_COLUMNS)
        + ")"
    )
    for (run_id, key_id, rank), points in itertools.groupby(rows, key=lambda row: tuple(row[:3])):
        blocks = summarise((row[3], (row[4], row[5])) for row in points)
        connection.execute(
            insert,
            [
                {"run_id": run_id, "key_id": key_id, "rank": rank, "block": block}
                | dict(zip(SUMMARY_COLUMNS, summary, strict=True))
                for block, summary in blocks.items()
            ],
        )


def downgrade() -> None:
    op.drop_table("series_block")
