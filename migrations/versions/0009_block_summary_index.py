"""metric_block: a covering index of the block summaries, so a long curve downsamples without reading blocks

``metric_block`` keeps each block's packed points in its rows (a row is ~6 KB for 256 points), so reading
only the summaries of a 10,000,000-point series still walked 39,000 rows' pages (0.2 s on SQLite). This
index holds what choosing the buckets reads (block, count, lowest and highest value): ~40 bytes a block.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_metric_block_summary",
        "metric_block",
        ["run_id", "key_id", "rank", "block", "points", "min_value", "max_value"],
    )


def downgrade() -> None:
    op.drop_index("ix_metric_block_summary", table_name="metric_block")
