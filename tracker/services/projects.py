"""Projects with their experiments and run counts: what a page needs to offer its choices without reading
every run."""

from __future__ import annotations

from sqlalchemy import func, select

from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.schemas.projects import ExperimentPublic, ProjectPublic, ProjectsPublic


def list_projects(db: Database, *, project: str | None = None) -> ProjectsPublic:
    """Every project (only ``project`` when given), by name, each with its experiments by name and how many
    runs each holds. One statement, grouped in the database: its cost follows the number of experiments,
    and a count of runs read from the run table's experiment index."""
    experiment, project_table, run = models.Experiment, models.Project, models.Run
    query = (
        select(project_table.name, experiment.name, func.count(run.id))
        .join(experiment, experiment.project_id == project_table.id)
        .outerjoin(run, run.experiment_id == experiment.id)
        .group_by(project_table.name, experiment.id, experiment.name)
        .order_by(project_table.name, experiment.name)
    )
    if project is not None:
        query = query.where(project_table.name == project)
    grouped: dict[str, list[ExperimentPublic]] = {}
    with db.session() as session:
        for project_name, experiment_name, count in session.execute(query):
            grouped.setdefault(project_name, []).append(ExperimentPublic(name=experiment_name, runs=count))
    return ProjectsPublic(
        data=[
            ProjectPublic(name=name, runs=sum(e.runs for e in experiments), experiments=experiments)
            for name, experiments in grouped.items()
        ]
    )
