"""Reading a run's metric streams back."""

from __future__ import annotations

from contextlib import closing
from typing import Any

from pydantic_core import to_json
from sqlalchemy import select

from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.db.models import BLOCK_STEPS
from plateau_tracker.server.errors import NotFoundError
from plateau_tracker.server.schemas.metrics import KeysPublic
from plateau_tracker.server.services import _point_store, block_format
from plateau_tracker.server.services.run_rows import get_run_row


def keys(db: Database, run_id: int) -> KeysPublic:
    """The metric keys the run has points for, sorted, with the ranks each key has points from."""
    with db.session() as session:
        get_run_row(session, run_id)
        series = _point_store.series_of(session, run_id)
        named = select(models.MetricKey.id, models.MetricKey.name).where(
            models.MetricKey.id.in_({key_id for key_id, _, _ in series})
        )
        names = {key_id: name for key_id, name in session.execute(named)}
    ranks: dict[str, list[int]] = {}
    points: dict[str, int] = {}
    for key_id, rank, count in series:
        ranks.setdefault(names[key_id], []).append(rank)
        points[names[key_id]] = points.get(names[key_id], 0) + count
    ordered = sorted(ranks)
    return KeysPublic(
        run_id=run_id,
        keys=ordered,
        ranks={name: sorted(ranks[name]) for name in ordered},
        points={name: points[name] for name in ordered},
    )


def page_json(
    db: Database, run_id: int, key: str, *, rank: int, start_step: int, limit: int, columns: bool = False
) -> bytes:
    """Up to ``limit`` points of ``key`` on ``rank`` from ``start_step`` on, in step order, as JSON: a
    :class:`HistoryPage`, or with ``columns`` a :class:`HistoryColumns` (one list per field). The page goes
    to JSON in one pydantic-core call (NaN and +-inf spelled as the schemas spell them), not through a model
    per point."""
    points, next_step = _page(db, run_id, key, rank=rank, start_step=start_step, limit=limit)
    steps, values, wall_times = points.steps.tolist(), points.values.tolist(), points.wall_times.tolist()
    body: dict[str, Any] = {"run_id": run_id, "key": key, "rank": rank}
    if columns:
        body |= {"steps": steps, "values": values, "wall_times": wall_times}
    else:
        body["points"] = [
            {"step": step, "value": value, "wall_time": wall_time}
            for step, value, wall_time in zip(steps, values, wall_times, strict=True)
        ]
    body["next_step"] = next_step
    return to_json(body, inf_nan_mode="strings")


def page_binary(
    db: Database, run_id: int, key: str, *, rank: int, start_step: int, limit: int
) -> tuple[bytes, int, int | None]:
    """The page of :func:`page_json` as packed columns: the steps (little-endian int64), then the values and
    the wall times (little-endian float64, NaN and +-inf bit for bit), the form the store keeps them in, so
    neither side parses anything. Returns the body, its number of points and the next page's step."""
    points, next_step = _page(db, run_id, key, rank=rank, start_step=start_step, limit=limit)
    body = b"".join(
        (
            points.steps.astype("<i8", copy=False).tobytes(),
            points.values.astype("<f8", copy=False).tobytes(),
            points.wall_times.astype("<f8", copy=False).tobytes(),
        )
    )
    return body, len(points), next_step


def _page(
    db: Database, run_id: int, key: str, *, rank: int, start_step: int, limit: int
) -> tuple[block_format.Points, int | None]:
    """Up to ``limit`` points from ``start_step`` on, and the step of the point after them (None at the end).

    The packed blocks are read through the driver's own cursor until they hold the page and the step after
    it, not through the ORM."""
    with db.session() as session:
        get_run_row(session, run_id)
        key_id = session.execute(select(models.MetricKey.id).where(models.MetricKey.name == key)).scalar()
        if key_id is None:
            raise NotFoundError(f"metric key {key!r} has no points in run {run_id}")
        blocks: list[Any] = []
        held = 0
        with closing(session.connection().connection.cursor()) as cursor:
            cursor.execute(
                _point_store.driver_select(
                    "step_data, value_data, wall_data", sqlite=db.is_sqlite, from_block=True
                ),
                {"run": run_id, "key": key_id, "rank": rank, "block": start_step // BLOCK_STEPS},
            )
            # Enough blocks for the page and the step after it (the next page's start); the first block
            # may hold up to BLOCK_STEPS - 1 points before ``start_step``.
            while held <= limit + BLOCK_STEPS:
                fetched = cursor.fetchmany((limit + BLOCK_STEPS - held) // BLOCK_STEPS + 1)
                if not fetched:
                    break
                blocks += fetched
                held += sum(len(row[0]) for row in fetched) // 8
    points = block_format.unpack(blocks).between(start_step, None)
    next_step = int(points.steps[limit]) if len(points) > limit else None
    return points.head(limit), next_step
