"""``plateau import tensorboard``: scalar series from existing event files, one run per event-file folder.

Reads every ``*tfevents*`` file record by record (``_event_file.read_events``: stopping, as TensorBoard's
loaders do, at a record cut short), in file-name order (the order TensorBoard reads them), and takes
scalars in both forms: legacy ``simple_value`` and tensor summaries of the scalars plugin (TF2's
``tf.summary.scalar``, where only a tag's first value carries the plugin metadata). A tag ``key/rank<N>``
is key ``key`` on rank N. Where a tag has a step twice (a restarted job), the later value
wins, as in TensorBoard. HParams session data becomes the run's config.

Runs are keyed by the folder's absolute path and the experiment, and batches have fixed ids, so importing
the same folder again adds nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import struct
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.util import tensor_util

from plateau_tracker._progress import Progress
from plateau_tracker.client import connect
from plateau_tracker.server.schemas.metrics import EARLIEST_WALL_TIME, LATEST_WALL_TIME, MAX_POINT_OBJECTS
from plateau_tracker.server.tb import _tags
from plateau_tracker.server.tb._event_file import read_events

BATCH_POINTS = MAX_POINT_OBJECTS  # the tracker's bound on one batch in the points form


@dataclass
class RunImport:
    directory: Path
    run_id: int
    name: str
    points: int = 0
    accepted: int = 0
    series: int = 0
    skipped_values: int = 0


@dataclass
class ImportReport:
    runs: list[RunImport] = field(default_factory=list)

    @property
    def points(self) -> int:
        return sum(run.points for run in self.runs)


@dataclass
class _RunData:
    # (tag) -> step -> (value, wall_time); later events overwrite earlier ones.
    series: dict[str, dict[int, tuple[float, float]]] = field(default_factory=dict)
    summary: dict[str, float] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    skipped: int = 0


def event_dirs(logdir: Path) -> list[Path]:
    """Folders under ``logdir`` (itself included) that hold event files, sorted."""
    return sorted({path.parent for path in logdir.rglob("*tfevents*") if path.is_file()})


def _scalar(value: Any, plugin: str | None) -> float | None:
    """The scalar a summary value holds, or None if it holds something else."""
    kind = value.WhichOneof("value")
    exact = value.metadata.plugin_data if value.HasField("metadata") else None
    if kind == "simple_value":
        if exact is not None and exact.plugin_name == _tags.EXACT_PLUGIN and len(exact.content) == 8:
            exact_value: float = struct.unpack("<d", exact.content)[0]
            return exact_value
        return float(value.simple_value)
    if kind == "tensor" and plugin == "scalars":
        array = tensor_util.make_ndarray(value.tensor)
        if array.size == 1 and array.dtype.kind in "fiub":
            return float(array.reshape(()).item())
    return None


def _hparams(value: Any, data: _RunData) -> None:
    start = hparams_metadata.parse_session_start_info_plugin_data(value.metadata.plugin_data.content)
    for name, hparam in start.hparams.items():
        kind = hparam.WhichOneof("kind")
        setting = getattr(hparam, kind) if kind else None
        if name == _tags.RUN_NAME_HPARAM:
            data.name = str(setting)
        elif not name.startswith(_tags.HPARAM_PREFIX):
            if isinstance(setting, float) and setting.is_integer():
                setting = int(setting)
            data.config[name] = setting


def read_run(directory: Path) -> _RunData:
    """Every scalar of the event files directly in ``directory``."""
    data = _RunData()
    plugins: dict[str, str] = {}  # a tag's plugin, from the first value that carried metadata
    for path in sorted(p for p in directory.glob("*tfevents*") if p.is_file()):
        for event in read_events(path):
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                tag = value.tag
                if (
                    value.HasField("metadata")
                    and value.metadata.plugin_data.plugin_name != _tags.EXACT_PLUGIN
                ):
                    plugins.setdefault(tag, value.metadata.plugin_data.plugin_name)
                if tag == hparams_metadata.SESSION_START_INFO_TAG:
                    _hparams(value, data)
                    continue
                scalar = _scalar(value, plugins.get(tag))
                if scalar is None:
                    data.skipped += 1
                elif tag.startswith((_tags.SUMMARY_PREFIX, _tags.LEGACY_SUMMARY_PREFIX)):
                    data.summary[tag.split("summary/", 1)[1]] = scalar
                elif tag.startswith((_tags.NAMESPACE, _tags.FIGURES_NAMESPACE)):
                    continue  # decisions, best value, convergence: the tracker derives them again
                else:
                    data.series.setdefault(tag, {})[event.step] = (scalar, event.wall_time)
    return data


def _run_key(directory: Path, experiment: str) -> str:
    digest = hashlib.sha256(f"{directory.resolve()}\0{experiment}".encode()).hexdigest()[:32]
    return f"tensorboard-{digest}"


def import_logdir(
    logdir: Path,
    url: str,
    *,
    experiment: str,
    project: str = "default",
    token: str | None = None,
    progress_to: TextIO | None = None,
) -> ImportReport:
    """Import every event-file folder under ``logdir`` as a finished run of ``experiment``. On a terminal
    (``progress_to``, standard error by default) one line shows the folders read and the points sent."""
    report = ImportReport()
    folders = event_dirs(logdir)
    progress = Progress("plateau import", unit="points sent", stream=progress_to)
    with connect(url, token=token) as api, contextlib.closing(progress):
        for directory in folders:
            data = read_run(directory)
            relative = directory.relative_to(logdir).as_posix()
            name = data.name or (logdir.resolve().name if relative == "." else relative)
            run_key = _run_key(directory, experiment)
            ranks = {_tags.parse_tag(tag)[1] for tag in data.series}
            body: dict[str, Any] = {
                "project": project,
                "experiment": experiment,
                "name": name[:200],
                "run_key": run_key,
                "config": {**data.config, "tensorboard_logdir": str(directory.resolve())},
                "tags": ["tensorboard-import"],
                "world_size": max(ranks, default=0) + 1,
            }
            walls = [wall for steps in data.series.values() for _, wall in steps.values() if _plausible(wall)]
            if walls:  # the run started when its events did, so the tracker keeps their times
                body["started_at"] = datetime.fromtimestamp(min(walls), timezone.utc).isoformat()
            created = api.create_run(body)
            result = RunImport(
                directory=directory, run_id=created["id"], name=name, skipped_values=data.skipped
            )
            points: list[dict[str, Any]] = []
            for tag, steps in sorted(data.series.items()):
                key, rank = _tags.parse_tag(tag)
                result.series += 1
                for step, (value, wall_time) in sorted(steps.items()):
                    if step < 0:
                        continue
                    point = {"key": key, "rank": rank, "step": step, "value": value}
                    if _plausible(wall_time):  # else the tracker's clock: no clock reads 1970
                        point["wall_time"] = wall_time
                    points.append(point)
            for number, start in enumerate(range(0, len(points), BATCH_POINTS)):
                batch = points[start : start + BATCH_POINTS]
                # The batch id is the content's hash: the same points again are acknowledged, not
                # re-applied, and a folder that has grown since sends its new points under new ids.
                digest = hashlib.sha256(json.dumps([run_key, number, batch]).encode()).hexdigest()[:48]
                answer = api.send_points(created["id"], f"tb-{digest}", batch)
                result.accepted += answer.accepted
                progress.add(len(batch))
            result.points = len(points)
            if data.summary:
                # Counts were exported as floats (TensorBoard's scalars are); whole numbers come back whole.
                api.update_summary(
                    created["id"],
                    {k: int(v) if v.is_integer() else v for k, v in data.summary.items()},
                )
            if created["status"] == "running":
                api.finish_run(created["id"], "finished")
            report.runs.append(result)
    return report


def _plausible(wall_time: float) -> bool:
    """Whether the tracker takes ``wall_time`` as a time (an event file's clock may have been anything)."""
    return EARLIEST_WALL_TIME <= wall_time <= LATEST_WALL_TIME
