"""metric_block: each series' points packed per block of 256 steps, with the block's summary; replaces
metric_point (a row per point) and series_block (the summaries alone)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22
"""

from __future__ import annotations

import itertools
import math
import sys
from array import array
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# Frozen here as they were at this revision, so later changes to the live code cannot change what this
# migration writes.
BLOCK_STEPS = 256
_SUMMARY = (
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
_DATA = ("step_data", "value_data", "wall_data")
_BATCH = 2_000


def _key_and_summary_columns() -> list[sa.Column[Any]]:
    """The columns metric_block shares with the series_block of revision 0006 (new objects per table)."""
    return [
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
    ]


def upgrade() -> None:
    op.create_table(
        "metric_block",
        *_key_and_summary_columns(),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("step_data", sa.LargeBinary(), nullable=False),
        sa.Column("value_data", sa.LargeBinary(), nullable=False),
        sa.Column("wall_data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["key_id"], ["metric_key.id"], name=op.f("fk_metric_block_key_id_metric_key")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_metric_block_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "key_id", "rank", "block", name=op.f("pk_metric_block")),
        sqlite_with_rowid=False,
    )
    if op.get_bind().dialect.name == "postgresql":
        # Blocks grow by appends: out-of-line and uncompressed, PostgreSQL rewrites a block without
        # decompressing and recompressing it each time (a 1,000-point batch: 9.8 -> 6.2 ms in-process).
        # Packed doubles hardly compress anyway.
        for column in _DATA:
            op.execute(f"ALTER TABLE metric_block ALTER COLUMN {column} SET STORAGE EXTERNAL")
    _pack_stored_points()
    op.drop_table("series_block")
    op.drop_table("metric_point")


def _pack(typecode: str, numbers: Sequence[float]) -> bytes:
    packed = array(typecode, numbers)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def _unpack(typecode: str, data: bytes) -> list[Any]:
    unpacked = array(typecode)
    unpacked.frombytes(data)
    if sys.byteorder != "little":
        unpacked.byteswap()
    return unpacked.tolist()


def _block_row(key: tuple[int, int, int, int], points: Sequence[tuple[int, float, float]]) -> dict[str, Any]:
    """The metric_block row of one block's points (step order; NaN as NaN)."""
    steps = [p[0] for p in points]
    values = [p[1] for p in points]
    walls = [p[2] for p in points]
    finite = [i for i, value in enumerate(values) if not math.isnan(value)]
    low = min(finite, key=lambda i: values[i]) if finite else None  # min() keeps the first of ties
    high = max(finite, key=lambda i: (values[i], -i)) if finite else None
    row = dict(zip(("run_id", "key_id", "rank", "block"), key, strict=True))
    row |= {
        "points": len(points),
        "first_step": steps[0],
        "first_wall": walls[0],
        "min_value": None if low is None else values[low],
        "min_step": None if low is None else steps[low],
        "min_wall": None if low is None else walls[low],
        "max_value": None if high is None else values[high],
        "max_step": None if high is None else steps[high],
        "max_wall": None if high is None else walls[high],
        "last_step": steps[-1],
        "step_data": _pack("q", steps),
        "value_data": _pack("d", values),
        "wall_data": _pack("d", walls),
    }
    return row


def _batched(rows: Iterator[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    while batch := list(itertools.islice(rows, _BATCH)):
        yield batch


def _pack_stored_points() -> None:
    """The points stored before this revision, streamed in key order, packed a block at a time (SQLite
    kept NaN as NULL)."""
    connection = op.get_bind()
    rows = connection.execute(
        sa.text(
            "SELECT run_id, key_id, rank, step, value, wall_time FROM metric_point "
            "ORDER BY run_id, key_id, rank, step"
        ).execution_options(yield_per=10_000)
    )
    blocks = (
        _block_row(key, [(row[3], math.nan if row[4] is None else row[4], row[5]) for row in points])
        for key, points in itertools.groupby(
            rows, key=lambda row: (row[0], row[1], row[2], row[3] // BLOCK_STEPS)
        )
    )
    insert = sa.text(
        "INSERT INTO metric_block (run_id, key_id, rank, block, "
        + ", ".join((*_SUMMARY, "last_step", *_DATA))
        + ") VALUES (:run_id, :key_id, :rank, :block, "
        + ", ".join(f":{column}" for column in (*_SUMMARY, "last_step", *_DATA))
        + ")"
    ).bindparams(*(sa.bindparam(column, type_=sa.LargeBinary()) for column in _DATA))
    for batch in _batched(blocks):
        connection.execute(insert, batch)


def downgrade() -> None:
    op.create_table(
        "metric_point",
        sa.Column("run_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("key_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("rank", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("step", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("wall_time", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["key_id"], ["metric_key.id"], name=op.f("fk_metric_point_key_id_metric_key")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_metric_point_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "key_id", "rank", "step", name=op.f("pk_metric_point")),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "series_block",
        *_key_and_summary_columns(),
        sa.ForeignKeyConstraint(
            ["key_id"], ["metric_key.id"], name=op.f("fk_series_block_key_id_metric_key")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_series_block_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "key_id", "rank", "block", name=op.f("pk_series_block")),
        sqlite_with_rowid=False,
    )
    columns = ", ".join(("run_id", "key_id", "rank", "block", *_SUMMARY))
    op.execute(f"INSERT INTO series_block ({columns}) SELECT {columns} FROM metric_block")
    _unpack_stored_blocks()
    op.drop_table("metric_block")


def _unpack_stored_blocks() -> None:
    connection = op.get_bind()
    nan_as_null = connection.dialect.name == "sqlite"  # as metric_point kept it there
    blocks = connection.execute(
        sa.text("SELECT run_id, key_id, rank, step_data, value_data, wall_data FROM metric_block")
        .columns(
            sa.column("run_id"),
            sa.column("key_id"),
            sa.column("rank"),
            *(sa.column(column, sa.LargeBinary()) for column in _DATA),
        )
        .execution_options(yield_per=1_000)
    )
    points = (
        {
            "run_id": run_id,
            "key_id": key_id,
            "rank": rank,
            "step": step,
            "value": None if nan_as_null and math.isnan(value) else value,
            "wall_time": wall,
        }
        for run_id, key_id, rank, step_data, value_data, wall_data in blocks
        for step, value, wall in zip(
            _unpack("q", step_data), _unpack("d", value_data), _unpack("d", wall_data), strict=True
        )
    )
    insert = sa.text(
        "INSERT INTO metric_point (run_id, key_id, rank, step, value, wall_time) "
        "VALUES (:run_id, :key_id, :rank, :step, :value, :wall_time)"
    )
    for batch in _batched(points):
        connection.execute(insert, batch)
