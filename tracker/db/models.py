"""SQLAlchemy 2 models. The schema is made only by the Alembic revisions in ``migrations/``.

Point values keep NaN and +-inf: they live packed as IEEE doubles in ``metric_block``; a summary's
min and max are NULL when its block holds only NaN.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

MAX_ID = 2**31 - 1
"""The largest id the stores hold: ids are 32-bit integer columns (PostgreSQL's INTEGER), and PostgreSQL
refuses to compare one with a larger number (a 500 where a 422, or an empty answer, is meant)."""

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


def table_of(model: type[Base]) -> Table:
    """The model's table, for statements in Core: the hot paths' statements skip the ORM's per-statement
    work, which cost about as much as the database's."""
    return Base.metadata.tables[model.__tablename__]


class Project(Base):
    __tablename__ = "project"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Experiment(Base):
    __tablename__ = "experiment"
    __table_args__ = (UniqueConstraint("project_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Run(Base):
    __tablename__ = "run"
    __table_args__ = (
        UniqueConstraint("project_id", "run_key"),
        Index("ix_run_experiment_id", "experiment_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiment.id", ondelete="CASCADE"))
    run_key: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(200))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    tags: Mapped[list[Any]] = mapped_column(JSON)
    policy: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    world_size: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_heartbeat: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Highest step of the monitored metric the policy has judged; -1 before the first.
    judged_step: Mapped[int] = mapped_column(BigInteger)
    # Sequence number of the newest decision; 0 before the first.
    decision_seq: Mapped[int] = mapped_column(Integer)
    # Batches applied to the run: a worker's memory of the run (tracker/services/run_memory.py) is the
    # database's while this is the count it remembers. Whatever writes a run's points or rule states adds
    # one (ingest does, in the statement that writes the run's progress).
    write_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # Step at which the policy decided to stop; NULL while it has not. Once set, rules are no longer run.
    stop_step: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # The rule behind that stop (cross-run rules mark the run as pruned for its cohort).
    stop_rule: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # The step the run plans to end at, when it declared one (budget-aware rules use it).
    planned_steps: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # Figures the trainer reports once or rarely (model complexity, time per step), merged key by key.
    summary: Mapped[dict[str, Any]] = mapped_column(JSON)


class MetricKey(Base):
    __tablename__ = "metric_key"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(250), unique=True)


class MetricBlock(Base):
    """One series' points (one key of one rank of one run) in a block of ``BLOCK_STEPS`` steps
    (block = step // BLOCK_STEPS): the points themselves, packed, and a summary of them.

    Packed because there are millions of points: a row per point cost more to insert than everything else
    in ingest together, and a foreign-key check each on PostgreSQL. ``step_data`` holds the steps as
    little-endian int64 in ascending order, ``value_data`` and ``wall_data`` the values and wall times as
    little-endian float64 in the same order (NaN and +-inf kept bit for bit).

    The summary, kept by ingest in the same transaction: how many points, the first and the last step, and
    the lowest and highest value (NaN left out; NULL when the block holds only NaN), each with its step and
    wall time. A million-point curve downsampled for drawing reads ~4,000 summaries (from
    ``ix_metric_block_summary``, which covers them) and no points.
    """

    __tablename__ = "metric_block"
    __table_args__ = (
        # Covering what downsampling reads of every block (and of the blocks holding a bucket's extremes),
        # so it never walks the blocks' packed points.
        Index(
            "ix_metric_block_summary",
            "run_id",
            "key_id",
            "rank",
            "block",
            "points",
            "min_value",
            "max_value",
            "min_step",
            "min_wall",
            "max_step",
            "max_wall",
            "first_step",
            "first_wall",
        ),
        {"sqlite_with_rowid": False},
    )

    run_id: Mapped[int] = mapped_column(
        ForeignKey("run.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    key_id: Mapped[int] = mapped_column(ForeignKey("metric_key.id"), primary_key=True, autoincrement=False)
    rank: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    block: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    points: Mapped[int] = mapped_column(Integer)
    first_step: Mapped[int] = mapped_column(BigInteger)
    first_wall: Mapped[float] = mapped_column(Float)
    min_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    min_step: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    min_wall: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_step: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    max_wall: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_step: Mapped[int] = mapped_column(BigInteger)
    step_data: Mapped[bytes] = mapped_column(LargeBinary)
    value_data: Mapped[bytes] = mapped_column(LargeBinary)
    wall_data: Mapped[bytes] = mapped_column(LargeBinary)


BLOCK_STEPS = 256


class CohortView(Base):
    """An experiment's monitored key whose cohort view is kept: ``cohort_value`` and ``cohort_carry``
    hold every finished, unpruned run of the experiment for that key, kept up to date as runs finish, are
    pruned or get late points. Built on the first cross-run judgement that needs it (one scan), so a
    ``percentile`` judgement reads an index rather than every run's points."""

    __tablename__ = "cohort_view"

    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiment.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    key_id: Mapped[int] = mapped_column(ForeignKey("metric_key.id"), primary_key=True, autoincrement=False)


class _CohortMember:
    """The key of a run's rows in a cohort view: the view (experiment, key) and the run."""

    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiment.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    key_id: Mapped[int] = mapped_column(ForeignKey("metric_key.id"), primary_key=True, autoincrement=False)
    run_id: Mapped[int] = mapped_column(
        ForeignKey("run.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )


class CohortValue(_CohortMember, Base):
    """A finished, unpruned run's finite value of a viewed key at one step (rank 0): a row per point, so
    the values at a step are an index range, already sorted."""

    __tablename__ = "cohort_value"
    __table_args__ = (
        # The values at a step in order, with the run to leave out the one judged: covering.
        Index("ix_cohort_value_step", "experiment_id", "key_id", "step", "value", "run_id"),
        {"sqlite_with_rowid": False},
    )

    step: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    value: Mapped[float] = mapped_column(Float)


class CohortCarry(_CohortMember, Base):
    """A finished run that the policy stopped early (not pruned): it counts at every step after
    ``after_step`` (its stop, or its last point if later) with its last value, when that is finite."""

    __tablename__ = "cohort_carry"
    __table_args__ = (
        Index("ix_cohort_carry_value", "experiment_id", "key_id", "value", "after_step", "run_id"),
        {"sqlite_with_rowid": False},
    )

    after_step: Mapped[int] = mapped_column(BigInteger)
    value: Mapped[float] = mapped_column(Float)


class RungView(Base):
    """A rung step of an experiment's monitored key whose values ``rung_value`` keeps for ``asha``: every
    run's value at its first point at or after the rung. Built on the first judgement at that rung (one
    scan), then kept as each run's points arrive, so a rung judgement reads an index."""

    __tablename__ = "rung_view"

    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiment.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    key_id: Mapped[int] = mapped_column(ForeignKey("metric_key.id"), primary_key=True, autoincrement=False)
    rung_step: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)


class RungValue(Base):
    """A run's first point at or after a viewed rung (rank 0): its step, and its value when finite (NULL
    when not: such a run is outside the top, and a later point must not take its place). Keyed by run
    first, so a batch finds its own rows in one range; the second index holds a rung's values in order."""

    __tablename__ = "rung_value"
    __table_args__ = (
        Index("ix_rung_value_rung", "experiment_id", "key_id", "rung_step", "value", "run_id"),
        {"sqlite_with_rowid": False},
    )

    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiment.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    run_id: Mapped[int] = mapped_column(
        ForeignKey("run.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    key_id: Mapped[int] = mapped_column(ForeignKey("metric_key.id"), primary_key=True, autoincrement=False)
    rung_step: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    at_step: Mapped[int] = mapped_column(BigInteger)
    value: Mapped[float | None] = mapped_column(Float, nullable=True)


class RuleState(Base):
    __tablename__ = "rule_state"

    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), primary_key=True)
    rule_index: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    rule: Mapped[str] = mapped_column(String(64))
    state: Mapped[dict[str, Any]] = mapped_column(JSON)
    last_step: Mapped[int] = mapped_column(BigInteger)


class Decision(Base):
    """Append-only record of what the policy told the trainer, and why."""

    __tablename__ = "decision"

    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    step: Mapped[int] = mapped_column(BigInteger)
    action: Mapped[str] = mapped_column(String(16))
    rule: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(Text)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSON)
    best_step: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    best_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class IngestBatch(Base):
    """Batch ids already applied: a replayed batch is acknowledged, never applied twice."""

    __tablename__ = "ingest_batch"

    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), primary_key=True)
    batch_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    accepted: Mapped[int] = mapped_column(Integer)
    duplicates: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Webhook(Base):
    """A project's subscription: POST these events to ``url``, signed with ``secret``."""

    __tablename__ = "webhook"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(String(2000))
    events: Mapped[list[Any]] = mapped_column(JSON)
    # Kept as given: it signs every delivery (HMAC needs the key itself, a hash would not do).
    secret: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class WebhookDelivery(Base):
    """The outbox: one row per event per webhook, written in the transaction that caused the event and
    delivered after commit, retried until delivered or out of attempts."""

    __tablename__ = "webhook_delivery"
    __table_args__ = (Index("ix_webhook_delivery_due", "status", "next_attempt_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    webhook_id: Mapped[int] = mapped_column(ForeignKey("webhook.id", ondelete="CASCADE"), index=True)
    delivery_id: Mapped[str] = mapped_column(String(64), unique=True)
    event: Mapped[str] = mapped_column(String(32))
    run_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer)
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class ApiToken(Base):
    """An API token: a project's (scope ``read`` or ``write``), or an operator's (scope ``operator``, no
    project: it reads every project). Only its SHA-256 is stored; the token itself is shown once."""

    __tablename__ = "api_token"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int | None] = mapped_column(
        ForeignKey("project.id", ondelete="CASCADE"), index=True, nullable=True
    )
    name: Mapped[str] = mapped_column(String(200))
    scope: Mapped[str] = mapped_column(String(8))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
