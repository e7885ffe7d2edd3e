"""Deleting a run, or an experiment with its runs, and everything they hold.

A run's points, series, decisions, rule states, batch ids and its rows in the cross-run views go with it
through the schema's ``ON DELETE CASCADE``; the webhook outbox names runs without a foreign key (a
delivery outlives nothing it refers to), so its rows for the runs are deleted here, in the same
transaction. A trainer still logging to a deleted run is answered 404 from then on.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.errors import NotFoundError
from plateau_tracker.server.schemas.projects import Deleted
from plateau_tracker.server.services.run_rows import get_run_row

# Ids per statement: SQLite binds at most 32,766 parameters, and an experiment may hold more runs.
_CHUNK = 10_000


def delete_run(db: Database, run_id: int) -> Deleted:
    """Delete run ``run_id`` with everything it holds; :class:`NotFoundError` when there is none."""
    with db.session(write=True) as session:
        get_run_row(session, run_id, lock=True)
        return _delete_runs(session, [run_id])


def delete_experiment(db: Database, project: str, experiment: str) -> Deleted:
    """Delete experiment ``experiment`` of ``project`` and every run in it."""
    with db.session(write=True) as session:
        found = session.execute(
            select(models.Experiment)
            .join(models.Project, models.Project.id == models.Experiment.project_id)
            .where(models.Project.name == project, models.Experiment.name == experiment)
            .with_for_update()
        ).scalar_one_or_none()
        if found is None:
            raise NotFoundError(f"experiment {experiment!r} of project {project!r} does not exist")
        run_ids = session.scalars(select(models.Run.id).where(models.Run.experiment_id == found.id)).all()
        deleted = _delete_runs(session, run_ids)
        session.delete(found)
        return deleted.model_copy(update={"experiments": 1})


def _delete_runs(session: Session, run_ids: Sequence[int]) -> Deleted:
    points = deliveries = 0
    for start in range(0, len(run_ids), _CHUNK):
        chunk = list(run_ids[start : start + _CHUNK])
        points += session.execute(
            select(func.coalesce(func.sum(models.MetricBlock.points), 0)).where(
                models.MetricBlock.run_id.in_(chunk)
            )
        ).scalar_one()
        outbox = models.WebhookDelivery.run_id.in_(chunk)
        deliveries += session.execute(
            select(func.count()).select_from(models.WebhookDelivery).where(outbox)
        ).scalar_one()
        session.execute(delete(models.WebhookDelivery).where(outbox))
        session.execute(delete(models.Run).where(models.Run.id.in_(chunk)))
    return Deleted(runs=len(run_ids), experiments=0, points=int(points), deliveries=deliveries)
