"""``plateau export tensorboard``: stored runs as TensorBoard event files, one subdirectory per run.

What a run's directory holds (``tensorboard``'s protos, in its record format: ``_event_file``):

- every point of every key as a scalar (``simple_value``) at its step and wall time; per-rank series are
  tagged ``key/rank<N>``. TensorBoard keeps scalars as float32: where that would round a value, the exact
  float64 rides along in the value's metadata, so an import gives back exactly what was stored;
- every decision as a text summary (``plateau/decisions``) at its step;
- the best value (``~plateau/best_value`` at the best step), the summary figures
  (``~plateau/summary/<name>``) and convergence times (``~plateau/convergence/<name>``) as scalars,
  under a namespace that TensorBoard lists after the run's own curves;
- the config as HParams session data (with the run's status and stop rule), so the HParams dashboard
  lists the runs with those scalars as metrics.

Export again and the run's previous Plateau event file is replaced, never added to: no point twice.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.util import tensor_util

from plateau_tracker._progress import Progress
from plateau_tracker.client import TrackerClient, connect
from plateau_tracker.server.tb import _tags
from plateau_tracker.server.tb._event_file import EventFile

# Suffix of the event files export writes: a re-export removes the previous ones it finds, and only those.
FILE_SUFFIX = ".plateau"

_STATUS = {"finished": "STATUS_SUCCESS", "stopped": "STATUS_SUCCESS", "running": "STATUS_RUNNING"}


@dataclass
class RunExport:
    run_id: int
    directory: Path
    points: int = 0
    series: int = 0
    decisions: int = 0


@dataclass
class ExportReport:
    runs: list[RunExport] = field(default_factory=list)

    @property
    def points(self) -> int:
        return sum(run.points for run in self.runs)


def _scalar_value(tag: str, value: float) -> Any:

    proto = summary_pb2.Summary.Value(tag=tag, simple_value=value)
    if math.isfinite(value) and struct.unpack("<f", struct.pack("<f", value))[0] != value:
        proto.metadata.plugin_data.plugin_name = _tags.EXACT_PLUGIN
        proto.metadata.plugin_data.content = struct.pack("<d", value)
    return proto


def _event(step: int, wall_time: float, value: Any) -> Any:

    return event_pb2.Event(step=step, wall_time=wall_time, summary=summary_pb2.Summary(value=[value]))


def _text_value(tag: str, text: str) -> Any:

    return summary_pb2.Summary.Value(
        tag=tag,
        metadata=text_metadata.create_summary_metadata(display_name="", description=""),
        tensor=tensor_util.make_tensor_proto(text),
    )


def _flatten(config: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flatten(value, f"{name}.")
        else:
            yield name, value


def _hparams_values(run: dict[str, Any]) -> list[Any]:
    """The HParams plugin's session start and end summaries for ``run``."""

    start = plugin_data_pb2.SessionStartInfo(
        start_time_secs=datetime.fromisoformat(run["started_at"]).timestamp()
    )
    hparams = dict(_flatten(run["config"]))
    hparams[_tags.RUN_NAME_HPARAM] = run["name"]
    hparams["plateau/status"] = run["status"]
    hparams["plateau/stop_rule"] = run["stop_rule"] or ""
    for name, value in hparams.items():
        if isinstance(value, bool):
            start.hparams[name].bool_value = value
        elif isinstance(value, (int, float)):
            start.hparams[name].number_value = value
        elif isinstance(value, str):
            start.hparams[name].string_value = value
        else:  # lists, None: shown as their JSON
            start.hparams[name].string_value = json.dumps(value)
    values = [
        summary_pb2.Summary.Value(
            tag=metadata.SESSION_START_INFO_TAG,
            metadata=metadata.create_summary_metadata(
                plugin_data_pb2.HParamsPluginData(session_start_info=start)
            ),
        )
    ]
    status = _STATUS.get(run["status"], "STATUS_FAILURE")
    if status != "STATUS_RUNNING":
        end = plugin_data_pb2.SessionEndInfo(status=api_pb2.Status.Value(status))
        if run.get("ended_at"):
            end.end_time_secs = datetime.fromisoformat(run["ended_at"]).timestamp()
        values.append(
            summary_pb2.Summary.Value(
                tag=metadata.SESSION_END_INFO_TAG,
                metadata=metadata.create_summary_metadata(
                    plugin_data_pb2.HParamsPluginData(session_end_info=end)
                ),
            )
        )
    return values


def _decision_text(decisions: list[dict[str, Any]]) -> str:
    lines = []
    for decision in decisions:
        best = f" (best step {decision['best_step']})" if decision.get("best_step") is not None else ""
        lines.append(f"**{decision['action']}** by `{decision['rule']}`{best}: {decision['reason']}")
    return "\n\n".join(lines)


def _write_run(
    api: TrackerClient, run: dict[str, Any], keys: dict[str, Any], directory: Path, progress: Progress
) -> RunExport:

    directory.mkdir(parents=True, exist_ok=True)
    previous = sorted(directory.glob(f"*tfevents*{FILE_SUFFIX}"))
    report = RunExport(run_id=run["id"], directory=directory)
    start_time = datetime.fromisoformat(run["started_at"]).timestamp()
    writer = EventFile(directory, suffix=FILE_SUFFIX)
    try:
        for value in _hparams_values(run):
            writer.add_event(_event(0, start_time, value))
        key_ranks: dict[str, list[int]] = keys["ranks"]
        for key, ranks in key_ranks.items():
            per_rank = ranks != [0]
            for rank in ranks:
                tag = _tags.series_tag(key, rank, per_rank=per_rank)
                report.series += 1
                for step, value, wall_time in api.history(run["id"], key, rank):
                    writer.add_event(_event(step, wall_time, _scalar_value(tag, value)))
                    report.points += 1
                    progress.add()
        decisions = [d for d in api.decision_list(run["id"]) if d["action"] != "continue"]
        report.decisions = len(decisions)
        by_step: dict[int, list[dict[str, Any]]] = {}
        for decision in decisions:
            by_step.setdefault(decision["step"], []).append(decision)
        for step, at_step in sorted(by_step.items()):
            moment = datetime.fromisoformat(at_step[-1]["created_at"]).timestamp()
            writer.add_event(_event(step, moment, _text_value(_tags.DECISIONS_TAG, _decision_text(at_step))))
        summary = api.summary(run["id"])
        end_time = datetime.fromisoformat(run["ended_at"]).timestamp() if run.get("ended_at") else start_time
        convergence = summary["convergence"]
        if convergence.get("best_step") is not None and convergence.get("best_value") is not None:
            writer.add_event(
                _event(
                    convergence["best_step"],
                    end_time,
                    _scalar_value(_tags.BEST_TAG, convergence["best_value"]),
                )
            )
        figures = [(_tags.SUMMARY_PREFIX + name, value) for name, value in summary["summary"].items()]
        figures += [
            (_tags.CONVERGENCE_PREFIX + name, value)
            for name, value in convergence.items()
            if name not in ("best_step", "first_best_step", "best_value", "stop_step")
        ]
        for tag, value in figures:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                writer.add_event(_event(0, end_time, _scalar_value(tag, float(value))))
    finally:
        writer.close()
    # The new file has a name no earlier export used (time, host, pid, counter); should it ever have taken
    # an old one's name, it overwrote that file, which must then stay.
    written = set(directory.glob(f"*tfevents*{FILE_SUFFIX}")) - set(previous)
    if written:
        for old in previous:
            old.unlink(missing_ok=True)
    return report


def export_runs(
    url: str,
    logdir: Path,
    *,
    run_ids: list[int] | None = None,
    experiment: str | None = None,
    project: str | None = None,
    token: str | None = None,
    progress_to: TextIO | None = None,
) -> ExportReport:
    """Write the given runs (or every run of ``experiment``) under ``logdir``, one folder per run, named
    ``<name>-<id>`` so it is the same folder on every export. On a terminal (``progress_to``, standard
    error by default) one line shows the points written of all, the rate and the time left."""
    report = ExportReport()
    with connect(url, token=token) as api:
        if run_ids:
            runs = [api.run(run_id) for run_id in run_ids]
        elif experiment is not None:
            runs = api.runs(project=project, experiment=experiment)
        else:
            raise ValueError("name runs or an experiment to export")
        keys = {run["id"]: api.keys(run["id"]) for run in runs}
        total = sum(sum(k.get("points", {}).values()) for k in keys.values())
        progress = Progress("plateau export", total=total or None, stream=progress_to)
        try:
            for run in runs:
                directory = logdir / f"{_tags.safe_dirname(run['name'])}-{run['id']}"
                report.runs.append(_write_run(api, run, keys[run["id"]], directory, progress))
        finally:
            progress.close()
    return report
