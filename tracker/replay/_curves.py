"""Recorded curves to replay: JSON-lines files (the OPDA schema) and runs stored in a tracker."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from plateau_tracker._numbers import NON_FINITE, number
from plateau_tracker._progress import Progress
from plateau_tracker.client import NotFoundError, TrackerClient, connect
from plateau_tracker.server.policy import Mode

LR_KEY = "lr"
TRAIN_KEY = "train/loss"


@dataclass(frozen=True)
class Curve:
    """One run's recorded checkpoints. ``watch`` is the metric a policy judges, ``score`` the one its
    outcome is scored on, ``cost[i]`` the compute spent up to checkpoint i (seconds, else steps)."""

    source: str
    run_id: str
    steps: list[int]
    watch: list[float]
    score: list[float]
    cost: list[float]
    extras: dict[str, list[float]] = field(default_factory=dict)
    planned_steps: int | None = None
    complete: bool = True
    mode: Mode | None = None
    family: str | None = None
    score_mode: Mode | None = None

    def score_sign(self, mode: Mode) -> float:
        """+1 where a higher score is better: the score's own mode, else the watched metric's ``mode``."""
        return 1.0 if (self.score_mode or mode) == "max" else -1.0


def _is_number(value: Any) -> bool:
    """A per-checkpoint value a curve file may hold: a JSON number, null (not recorded there), or NaN and
    +-inf spelled as the API spells them (the strings ``NaN``, ``Infinity``, ``-Infinity``: strict JSON has
    no literal for them)."""
    if value is None or isinstance(value, str):
        return value is None or value in NON_FINITE
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _floats(values: list[Any] | None, n: int) -> list[float]:
    if values is None:
        return [math.nan] * n
    return [math.nan if (f := number(v)) is None else f for v in values]  # the API's decoding of a float


def _schedule(hparams: dict[str, Any], steps: list[int], budget: int | None) -> list[float] | None:
    """The learning rate at each checkpoint, from the schedule the hyperparameters describe.

    OPDA does not log the rate; its trainers' schedules are known: the ImageNet runs use a triangular
    schedule (linear up to ``lr_peak_epoch``, linear down to 0 at ``epochs``), the DeBERTa runs a linear
    warm-up over ``warmup_steps`` then a linear decay to 0 at ``total_model_steps``. A trainer using
    Plateau logs its rate instead (``run.log({"lr": ...})``).
    """
    if {"lr", "lr_peak_epoch", "epochs"} <= hparams.keys():
        peak, end, top = float(hparams["lr_peak_epoch"]), float(hparams["epochs"]), float(hparams["lr"])
        return [top * (s / peak if s <= peak else max(0.0, (end - s) / (end - peak))) for s in steps]
    if {"learning_rate", "warmup_steps"} <= hparams.keys():
        total = float(hparams.get("total_model_steps") or budget or 0)
        warm, top = float(hparams["warmup_steps"]), float(hparams["learning_rate"])
        if total <= warm:
            return None
        return [top * (s / warm if s < warm else max(0.0, (total - s) / (total - warm))) for s in steps]
    return None


def _series(record: dict[str, Any], n: int) -> dict[str, list[float]]:
    """Every per-checkpoint series of a record: a list of ``n`` numbers (or nulls) under any key."""
    return {
        key: _floats(values, n)
        for key, values in record.items()
        if key != "x" and isinstance(values, list) and len(values) == n and all(_is_number(v) for v in values)
    }


def _whole_step(x: Any) -> int:
    """A checkpoint's step: a whole number (``2.0`` is step 2). A fraction is refused, not truncated: 0.5,
    1.0 and 1.5 would become steps 0, 1 and 1, two checkpoints at one step."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not float(x).is_integer():
        raise ValueError(f"x must hold whole steps (an epoch or a batch count), got {x!r}")
    return int(x)


def curve_from_record(record: dict[str, Any], *, metric: str, score: str) -> Curve | None:
    """A :class:`Curve` from one line of the OPDA-schema JSON-lines format; None for an empty run or one
    with no ``metric`` series. Only the checkpoints where ``metric`` is recorded (not null) are kept.

    Every per-checkpoint series in the record (``lr``, ``train_loss``, ``val_loss``, any key a policy
    names) is handed to the rules under its own name, as the trainer would have logged it; ``train_loss``
    is also ``train/loss``. A run with no ``lr`` series gets the rate its documented schedule implies
    (OPDA's runs), when its hyperparameters describe one. ``mode`` (``min``/``max``), when present, is the
    direction the watched metric improves in, ``score_mode`` that of the scored one (default: ``mode``).
    """
    steps = [_whole_step(x) for x in record.get("x") or []]
    n = len(steps)
    series = _series(record, n)
    if metric not in series:  # an empty run, or one that never recorded the watched metric
        return None
    # Where the watched metric is null the run was not evaluated (validated every other epoch, its other
    # series at every one): a policy judges only the checkpoints it was.
    evaluated = [i for i, v in enumerate(record[metric]) if v is not None]
    if not evaluated:
        return None
    if len(evaluated) < n:  # only the checkpoints the metric was evaluated at (their costs are cumulative)
        steps = [steps[i] for i in evaluated]
        series = {key: [values[i] for i in evaluated] for key, values in series.items()}
    watch = series[metric]
    scored = series.get(score) or watch
    cost = series.get("time_s") or [float(s) for s in steps]
    extras = dict(series)
    if "train_loss" in series:
        extras[TRAIN_KEY] = series["train_loss"]
    budget = record.get("budget")
    if LR_KEY not in extras:
        lr = _schedule(record.get("hparams") or {}, steps, budget)
        if lr is not None:
            extras[LR_KEY] = lr
    mode, score_mode = record.get("mode"), record.get("score_mode")
    return Curve(
        source=str(record.get("source", "curves")),
        run_id=str(record.get("run_id")),
        steps=steps,
        watch=watch,
        score=scored,
        cost=cost,
        extras=extras,
        planned_steps=int(budget) if budget else None,
        complete=bool(record.get("complete", True)),
        mode=mode if mode in get_args(Mode) else None,
        family=str(record["family"]) if record.get("family") else None,
        score_mode=score_mode if score_mode in get_args(Mode) else None,
    )


def load_jsonl(
    path: Path,
    *,
    metric: str,
    score: str,
    unwatched: list[str] | None = None,
    unscored: list[str] | None = None,
) -> Iterator[Curve]:
    """The runs of a JSON-lines curve file; a run that never recorded ``metric`` is skipped, and named
    (``source/run_id``) in ``unwatched`` when a list is given, so the caller can say so; a run without a
    ``score`` series is scored on ``metric`` and named in ``unscored``. A record without a ``run_id`` is
    named by its line (``line 7``)."""
    with path.open() as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from exc
            if record.get("run_id") is None:  # named by its line, not as "None" (every such run alike)
                record["run_id"] = f"line {number}"
            try:
                curve = curve_from_record(record, metric=metric, score=score)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: {exc}") from exc
            if curve is not None:
                # curve_from_record scores on the watched series itself when the record has no score series
                if unscored is not None and score != metric and curve.score is curve.watch:
                    unscored.append(f"{curve.source}/{curve.run_id}")
                yield curve
            elif unwatched is not None and record.get("x"):
                unwatched.append(f"{record.get('source', 'curves')}/{record.get('run_id')}")


def _history(client: TrackerClient, run_id: int, key: str) -> dict[int, tuple[float, float]]:
    """Step -> (value, wall time) of rank 0's ``key``; empty when the run has no such key."""
    try:
        return {step: (value, wall_time) for step, value, wall_time in client.history(run_id, key)}
    except NotFoundError:
        return {}


def load_tracker(
    url: str | None,
    *,
    project: str | None,
    experiment: str,
    metric: str,
    score: str,
    token: str | None = None,
    unwatched: list[str] | None = None,
    unscored: list[str] | None = None,
) -> Iterator[Curve]:
    """The stored runs of ``experiment`` (oldest first), read over the tracker's HTTP API (``url``, else
    ``$PLATEAU_URL``; ``token``, else ``$PLATEAU_TOKEN``). As :func:`load_jsonl`: a run with no ``metric``
    points is skipped and named in ``unwatched``, one with no ``score`` points scored on ``metric`` and
    named in ``unscored``."""
    with connect(url, token=token) as client:
        runs = client.runs(project=project, experiment=experiment)
        progress = Progress("plateau replay: reading", total=len(runs), unit="runs", clock_every=1)
        try:
            yield from _tracker_curves(client, runs, experiment, metric, score, unwatched, unscored, progress)
        finally:
            progress.close()


def _tracker_curves(
    client: TrackerClient,
    runs: list[dict[str, Any]],
    experiment: str,
    metric: str,
    score: str,
    unwatched: list[str] | None,
    unscored: list[str] | None,
    progress: Progress,
) -> Iterator[Curve]:
    """Each run's curves, read one run at a time (``progress`` counts them)."""
    for run in runs:
        watched = _history(client, run["id"], metric)
        if not watched:
            if unwatched is not None:
                unwatched.append(f"{experiment}/{run['id']}")
            progress.add()
            continue
        scored = _history(client, run["id"], score) if score != metric else watched
        steps = sorted(watched)
        watch = [watched[s][0] for s in steps]
        if not scored and unscored is not None:  # no --score points: scored on the watched metric
            unscored.append(f"{experiment}/{run['id']}")
        start = watched[steps[0]][1]
        extras = {}
        for key in (TRAIN_KEY, LR_KEY):
            series = _history(client, run["id"], key)
            if series:
                extras[key] = [series.get(s, (math.nan, 0.0))[0] for s in steps]
        planned = run.get("planned_steps") or run["config"].get("planned_steps")
        progress.add()
        yield Curve(
            source=experiment,
            run_id=str(run["id"]),
            steps=steps,
            watch=watch,
            # the watched series itself where --score has none (found by identity: see the command)
            score=[scored.get(s, (math.nan, 0.0))[0] for s in steps] if scored else watch,
            cost=[watched[s][1] - start for s in steps],
            extras=extras,
            planned_steps=int(planned) if planned else None,
            complete=run["status"] == "finished" and run["stop_step"] is None,
        )
