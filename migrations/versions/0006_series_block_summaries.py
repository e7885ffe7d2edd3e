"""series_block: per-block summaries of each series, so long curves downsample without reading every point

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# Frozen here as they were at this revision, so later changes to the live code cannot change what this
# migration writes.
BLOCK_STEPS = 256
SUMMARY_COLUMNS = (
    "points",
    "first_step",
    "first_wall",
    "min_value",
    "min_step",
    "min_wall",
    "max_value",
    "max_step",
    "max_wall",
)


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


def summarise(points: Iterable[tuple[int, tuple[float | None, float]]]) -> dict[int, list[Any]]:
    """Per block (``step // BLOCK_STEPS``), the summary of ``(step, (value, wall_time))`` points in any
    order, in SUMMARY_COLUMNS' order; a value that is None (SQLite's NaN) or NaN counts as NaN, +-inf as
    values; the min and max fields stay None while a block has no value but NaN. Ties go to the earlier
    step."""
    blocks: dict[int, list[Any]] = {}
    for step, (value, wall_time) in points:
        block = blocks.get(step // BLOCK_STEPS)
        if block is None:
            block = blocks[step // BLOCK_STEPS] = [0, step, wall_time, None, None, None, None, None, None]
        block[0] += 1
        if step < block[1]:
            block[1], block[2] = step, wall_time
        if value is None or value != value:  # NaN
            continue
        if block[3] is None or value < block[3] or (value == block[3] and step < block[4]):
            block[3], block[4], block[5] = value, step, wall_time
        if block[6] is None or value > block[6] or (value == block[6] and step < block[7]):
            block[6], block[7], block[8] = value, step, wall_time
    return blocks


def downgrade() -> None:
    op.drop_table("series_block")
