"""Projects and their experiments, as the dashboard's selectors list them."""

from __future__ import annotations

from plateau_tracker.server.schemas._common import Schema


class ExperimentPublic(Schema):
    name: str
    runs: int


class ProjectPublic(Schema):
    name: str
    runs: int
    experiments: list[ExperimentPublic]


class ProjectsPublic(Schema):
    data: list[ProjectPublic]


class Deleted(Schema):
    """What a deletion removed: runs, experiments, the runs' points and their webhook deliveries."""

    runs: int
    experiments: int
    points: int
    deliveries: int
