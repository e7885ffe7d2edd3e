"""Metric points in (ingest) and out (history)."""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, TypeVar

from pydantic import BeforeValidator, Field, StrictFloat, StrictInt, ValidationError, model_validator

from plateau_tracker.server.schemas._common import MetricValue, Schema, Text, parse_metric_value
from plateau_tracker.server.schemas.decisions import DecisionPublic

MAX_POINTS_PER_BATCH = 100_000
MAX_POINT_OBJECTS = 10_000
"""Points in the ``points`` form of one batch: each is an object to validate, ~5 µs each, holding the
interpreter (100,000 took ~0.5 s, and health checks waited): larger batches go in the ``series`` form."""
MAX_SERIES_PER_BATCH = 10_000
"""Distinct (key, rank) series in one batch: each is a series to look up and extend in the transaction."""

Step = Annotated[StrictInt, Field(ge=0, le=2**62)]
Rank = Annotated[StrictInt, Field(ge=0, le=100_000)]
EARLIEST_WALL_TIME = 946_684_800.0  # 2000-01-01T00:00:00Z
LATEST_WALL_TIME = 4_102_444_800.0  # 2100-01-01T00:00:00Z
WallTime = Annotated[StrictFloat, Field(allow_inf_nan=False, ge=EARLIEST_WALL_TIME, le=LATEST_WALL_TIME)]
"""Seconds since the epoch, between 2000 and 2100: outside, no clock is plausible (a 422 names the field).
Within, the tracker still keeps a time between the run's start and its own clock (ingest's
``CLOCK_SKEW_S``)."""


class PointIn(Schema):
    """One value: ``key`` at ``step`` on ``rank``. ``wall_time`` is seconds since the epoch (the server's
    clock when absent)."""

    key: Text = Field(min_length=1, max_length=250)
    step: Step
    value: MetricValue
    rank: Rank = 0
    wall_time: WallTime | None = None


def _metric_values(raw: Any) -> Any:
    # The per-point rules of MetricValue over a whole column, with one Python call per column rather than
    # per value: a column of plain floats (the common case) passes untouched.
    if not isinstance(raw, list) or set(map(type, raw)) <= {float}:
        return raw
    parsed = []
    for index, value in enumerate(raw):
        try:
            parsed.append(parse_metric_value(value))
        except ValueError as exc:
            raise ValueError(f"item {index}: {exc}") from None
    return parsed


class SeriesIn(Schema):
    """Many points of one key on one rank, as columns: ``steps[i]``, ``values[i]`` and ``wall_times[i]``
    (the server's clock when ``wall_times`` is absent) form point ``i``. The compact form the SDK sends."""

    key: Text = Field(min_length=1, max_length=250)
    rank: Rank = 0
    steps: list[Step]
    values: Annotated[list[float], BeforeValidator(_metric_values)]
    wall_times: list[WallTime] | None = None

    @model_validator(mode="after")
    def _columns_align(self) -> SeriesIn:
        if len(self.values) != len(self.steps):
            raise ValueError(
                f"values has {len(self.values)} items and steps {len(self.steps)}; they must match"
            )
        if self.wall_times is not None and len(self.wall_times) != len(self.steps):
            raise ValueError(
                f"wall_times has {len(self.wall_times)} items and steps {len(self.steps)}; they must match"
            )
        return self


class MetricBatch(Schema):
    """A batch of points, as ``points`` (one object per point), ``series`` (columns per key and rank), or
    both. A ``batch_id`` seen before for this run is acknowledged and not applied again."""

    batch_id: Text = Field(min_length=1, max_length=64)
    points: list[PointIn] | None = Field(default=None, max_length=MAX_POINT_OBJECTS)
    series: list[SeriesIn] | None = None

    @model_validator(mode="after")
    def _has_points(self) -> MetricBatch:
        if self.points is None and self.series is None:
            raise ValueError("a batch needs points or series (or both)")
        if self.size() > MAX_POINTS_PER_BATCH:
            raise ValueError(f"a batch holds at most {MAX_POINTS_PER_BATCH} points; got {self.size()}")
        # Each series is looked up and extended in the same transaction: bounded, so one batch cannot hold
        # the write lock (and the tracker's memory) for everyone else.
        series = {(column.key, column.rank) for column in self.series or ()}
        if self.points is not None and len(series) <= MAX_SERIES_PER_BATCH:
            series.update((point.key, point.rank) for point in self.points)
        if len(series) > MAX_SERIES_PER_BATCH:
            raise ValueError(_too_many_series(len(series)))
        return self

    def size(self) -> int:
        """Points in the batch, in both forms."""
        return len(self.points or ()) + sum(len(s.steps) for s in self.series or ())


class RunBatch(MetricBatch):
    """One line of ``POST /api/v1/batches``: a run's batch, as the run's own route takes it, with the run's
    id (a process with many runs sends all their batches in one request)."""

    run_id: int = Field(ge=1, le=2**31 - 1)


class IngestResult(Schema):
    """``accepted``: points newly stored; ``duplicates``: points already stored (a replayed batch, or a
    key/rank/step logged before: the first value is kept). ``decision``: the run's latest decision.

    ``judged_step``: the newest step of the monitored metric the policy has judged (None: none yet).
    ``decisions``: the decisions this batch made, oldest first (for a replayed batch, the run's decisions
    at the batch's steps): with ``judged_step`` they tell a trainer exactly what was decided at the step
    it just logged, a checkpoint and a stop at the same step included.
    """

    accepted: int
    duplicates: int
    replayed: bool = False
    decision: DecisionPublic
    judged_step: int | None = None
    decisions: list[DecisionPublic] = Field(default_factory=list)
    late_points: int = Field(
        default=0,
        description="monitored points of this batch at steps already judged: judged only by the rules that "
        "judge a point on its own (non_finite, threshold, divergence); an alert says so the first time",
    )


class LineAnswer(Schema):
    """The answer to one line of ``POST /api/v1/batches``: status 200 with the run's ingest ``answer``, or
    the status and ``detail`` its own route would have answered (``retry_after``: seconds, with a 503)."""

    run_id: int | None = Field(description="null: the line could not be read")
    status: int
    answer: IngestResult | None = None
    detail: Any = None
    retry_after: str | None = None


class BatchesAnswer(Schema):
    """The answers to ``POST /api/v1/batches``, one per line, in the lines' order."""

    results: list[LineAnswer]


class PointOut(Schema):
    step: int
    value: MetricValue
    wall_time: float


class HistoryPage(Schema):
    """One page of a key's history in step order; ask again with ``start_step=next_step`` for more."""

    run_id: int
    key: str
    rank: int
    points: list[PointOut]
    next_step: int | None


class HistoryColumns(Schema):
    """A page of a key's history as columns (``form=columns``): the ingest series form, read back; about
    a third of the bytes and parse time of ``points`` for long reads."""

    run_id: int
    key: str
    rank: int
    steps: list[int]
    values: list[MetricValue]
    wall_times: list[float]
    next_step: int | None


class KeysPublic(Schema):
    run_id: int
    keys: list[str]
    ranks: dict[str, list[int]] = Field(
        default_factory=dict, description="the ranks each key has points from"
    )
    points: dict[str, int] = Field(
        default_factory=dict, description="how many points each key holds, all ranks"
    )


class SeriesPublic(Schema):
    """A key's curve for drawing: all points, or at most ``points`` of them chosen by min/max buckets."""

    run_id: int
    key: str
    rank: int
    total: int = Field(description="points stored for the key")
    downsampled: bool
    points: list[PointOut]


# A number literal with a three-digit exponent: the only kind that can overflow float64 to inf (1e400) or
# underflow it to 0.0 (1e-400). Searched for in the raw body (in C) before anything slower is done.
_LONG_EXPONENT = re.compile(rb"[eE][-+]?[0-9]{3}")


class _Unrepresentable:
    """A number literal float64 cannot hold, found where it stood in the body."""

    def __init__(self, literal: str) -> None:
        self.literal = literal


def _too_many_series(count: int) -> str:
    return (
        f"a batch holds at most {MAX_SERIES_PER_BATCH} distinct series (key and rank); got {count}: "
        "send the rest in other batches"
    )


def _too_many_points(count: int) -> str:
    return (
        f"the points form holds at most {MAX_POINT_OBJECTS} points a batch; got {count}: send larger "
        "batches in the series form (columns per key), up to 100,000 points"
    )


def _invalid(loc: tuple[str | int, ...], given: Any, message: str) -> ValidationError:
    return ValidationError.from_exception_data(
        "MetricBatch",
        [{"type": "value_error", "loc": loc, "input": given, "ctx": {"error": ValueError(message)}}],
    )


# A point object's "step" member: counted like the series below.
_POINT_MEMBER = re.compile(rb'"step"\s*:')

# A series object's "steps" member: counted in the raw body (in C) to refuse a batch of too many series
# before validating them (100,000 of them took 1.3 s of validation, holding the interpreter).
_STEPS_MEMBER = re.compile(rb'"steps"\s*:')


def parse_batch(body: bytes) -> MetricBatch:
    """A batch from the raw body: see :func:`parsed`."""
    return parsed(body, MetricBatch)


def parse_run_batch(line: bytes) -> RunBatch:
    """One line of ``POST /api/v1/batches``: see :func:`parsed`."""
    return parsed(line, RunBatch)


BatchT = TypeVar("BatchT", bound=MetricBatch)


def parsed(body: bytes, model: type[BatchT]) -> BatchT:
    """A ``model`` from the raw body, with pydantic's own JSON parser (several times faster than json.loads
    and validation of the objects). ValidationError otherwise, with ``loc`` naming the field, also for:

    - a number literal float64 cannot hold (``1e400`` would become inf, ``1e-400`` 0.0: a different
      number, never stored in its place);
    - a string that is not valid text (a lone surrogate): pydantic's parser refuses the whole body as
      invalid JSON, so it is read again with Python's json, which keeps the string for the schema to name.
    """
    # Each series takes 30 bytes at least ({"key":"","steps":[],"values":[]}): only a larger body can hold
    # too many, and only such a body is counted.
    if len(body) > 30 * MAX_SERIES_PER_BATCH and body.count(b'"steps"') > MAX_SERIES_PER_BATCH:
        count = len(_STEPS_MEMBER.findall(body))
        if count > MAX_SERIES_PER_BATCH:
            raise _invalid(("series",), count, _too_many_series(count))
    # The same for point objects (30 bytes each at least: {"key":"","step":0,"value":0}).
    if len(body) > 30 * MAX_POINT_OBJECTS and body.count(b'"step"') > MAX_POINT_OBJECTS:
        count = len(_POINT_MEMBER.findall(body))
        if count > MAX_POINT_OBJECTS:
            raise _invalid(("points",), count, _too_many_points(count))
    try:
        batch = model.model_validate_json(body)
    except ValidationError as exc:
        if not any(error["type"] == "json_invalid" for error in exc.errors()):
            raise
        try:
            loaded = json.loads(body)
        except (ValueError, RecursionError):  # invalid for Python too (deep nesting included)
            raise exc from None
        batch = model.model_validate(loaded)  # names the field, or validates what Python's json read
    # Only a batch holding inf or 0.0 can have had such a literal: look at the body only then (the search
    # costs ~250 µs on a 1,000-point body, the values' test a few µs).
    if _holds_inf_or_zero(batch) and _LONG_EXPONENT.search(body) is not None:
        _refuse_unrepresentable(body)
    return batch


_INF, _NEG_INF = math.inf, -math.inf


def _holds_inf_or_zero(batch: MetricBatch) -> bool:
    for column in batch.series or ():
        values = column.values
        if 0.0 in values or _INF in values or _NEG_INF in values:
            return True
    return any(point.value == 0.0 or point.value in (_INF, _NEG_INF) for point in batch.points or ())


def _refuse_unrepresentable(body: bytes) -> None:
    def number(literal: str) -> float | _Unrepresentable:
        value = float(literal)
        mantissa = re.split("[eE]", literal)[0]
        if math.isinf(value) or (value == 0.0 and any(c in "123456789" for c in mantissa)):
            return _Unrepresentable(literal)
        return value

    found = _find_unrepresentable(json.loads(body, parse_float=number), ())
    if found is None:
        return
    loc, literal = found
    raise _invalid(
        loc, literal, f"{literal} is beyond float64's range (it would be stored as a different number)"
    )


def _find_unrepresentable(
    value: Any, path: tuple[str | int, ...]
) -> tuple[tuple[str | int, ...], str] | None:
    if isinstance(value, _Unrepresentable):
        return path, value.literal
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _find_unrepresentable(item, (*path, key))
        if found is not None:
            return found
    return None
