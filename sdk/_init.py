"""``plateau_tracker.init``: the one way a training process starts (or joins) a run."""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from plateau_tracker._agree import detect_rank_world, shared_run_key
from plateau_tracker._context import CONTEXT_KEY, run_context
from plateau_tracker._local_judge import AwayVerdicts
from plateau_tracker._mode import resolve_mode
from plateau_tracker._offline import OfflineTransport, disabled_chosen, offline_chosen
from plateau_tracker._policy_check import check_policy
from plateau_tracker._run import Run
from plateau_tracker._sender import FLUSH_INTERVAL_S
from plateau_tracker._spool import Spool, default_spool_dir
from plateau_tracker._transport import DEFAULT_URL, Transport
from plateau_tracker._types import Combine, ModeChoice, Reduce

# The order of the parameters that could once be given by position, for the deprecated positional form.
_ONCE_POSITIONAL = ("experiment", "name", "config", "monitor", "mode", "rules", "url")

logger = logging.getLogger("plateau")
# Said once a process: a sweep's many runs share one reason.
_said_no_plan = False
_said_disabled = False


def init(
    project: str | None = None,
    *positional: Any,
    experiment: str | None = None,
    name: str | None = None,
    config: Mapping[str, Any] | None = None,
    monitor: str | None = None,
    mode: ModeChoice = "auto",
    rules: Sequence[Mapping[str, Any]] | None = None,
    url: str | None = None,
    transport: Transport | None = None,
    run_key: str | None = None,
    tags: Sequence[str] = (),
    rank: int | None = None,
    world_size: int | None = None,
    planned_steps: int | None = None,
    combine: Combine = "any",
    reduce: Reduce = "rank0",
    reduce_timeout_s: float | None = None,
    wait: float = 5.0,
    flush_interval: float = FLUSH_INTERVAL_S,
    max_pending: int = 100_000,
    exit_timeout: float = 10.0,
    decision_timeout: float = 5.0,
    spool_dir: str | os.PathLike[str] | None = None,
    spool: bool = True,
    spool_max_bytes: int = 512 * 1024 * 1024,
    token: str | None = None,
    record_context: bool = True,
    system_metrics: float | None = None,
) -> Run:
    """Start (or join, with ``run_key``) a run on the tracker and return it.

    ``project``, ``experiment``, ``name``, ``tags`` and ``mode`` left out are read from
    ``$PLATEAU_PROJECT``, ``$PLATEAU_EXPERIMENT`` (else ``default``), ``$PLATEAU_RUN_NAME``,
    ``$PLATEAU_TAGS`` (comma-separated) and ``$PLATEAU_MODE``; a project from neither is a ``TypeError``.

    ``monitor``/``mode``/``rules`` form the stopping policy (the tracker's default rules when ``rules`` is
    omitted); with no ``monitor`` nothing is judged. ``mode``: ``"min"`` (a loss), ``"max"`` (an accuracy),
    or ``"auto"`` (the default): read from the monitor's name, so ``val/acc``, ``val_accuracy``, ``eval_f1``
    or ``ndcg@10`` are maximised and ``val/loss``, ``eval_perplexity`` or ``val_error`` minimised; a name
    that says neither (``val``, ``score``) is minimised with a ``UserWarning`` asking for ``mode``.
    ``planned_steps``: the step the run plans to end at, for budget-aware rules (log the learning rate as
    ``"lr"`` too, and they also see the schedule). The default rules (``rules`` omitted) judge a run against
    it; without it they judge the pace one doubling of the run at a time, and with no validation loss
    either they fall back to patience; a warning says so once a process.
    ``combine``: ``"any"`` (the first rule that says stop stops) or ``"all"`` (every convergence rule must).
    ``reduce``: judge rank 0's value of ``monitor`` (``"rank0"``) or its mean/min/max over ranks, once
    every rank has logged the step, or ``reduce_timeout_s`` (the tracker's default: 60) after the first did,
    on the ranks present, which the decision then says.

    Distributed: rank and world size come from torch.distributed when it is initialised, else from
    RANK/WORLD_SIZE; all ranks join one run through ``run_key``, ``$PLATEAU_RUN_KEY``, torchrun's
    ``$TORCHELASTIC_RUN_ID``, or a key rank 0 broadcasts (then ``init`` is a collective).
    The tracker is at ``url``, else ``$PLATEAU_URL``, else http://127.0.0.1:8765; ``token`` (else
    ``$PLATEAU_TOKEN``) is the project's API token when the tracker requires one. ``init`` waits up to
    ``wait`` seconds for the tracker; if it is away, training goes on, points go to the disk spool
    (``spool_dir``, default ``$PLATEAU_HOME/spool``; ``spool=False`` keeps them in memory only), and the run
    is created and the spool replayed when the tracker answers, or later by ``plateau sync``.
    ``$PLATEAU_OFFLINE=1`` makes every run go that way from the start, with no attempt to reach a tracker;
    ``$PLATEAU_DISABLED=1`` makes runs that keep nothing (no spool either), whose ``should_checkpoint()``
    still marks each new best. A
    policy the tracker refuses raises ``ValueError`` here, before training starts: its shape (rule names,
    parameters, types, bounds; ``rules=[]``, which would judge nothing) is checked in this process, so a
    typo is caught with the tracker away too; the rest when the tracker answers. A bad ``url`` raises
    ``ValueError`` too.
    ``record_context`` (the default) records in the run's config, under ``plateau_context``, the git
    commit (and whether tracked files had changes), the command line, the host, Python and the versions of
    the training packages installed; ``False`` leaves it out.
    ``system_metrics=S`` samples the process's CPU and memory, the host's, and torch's GPU memory every
    ``S`` seconds in a thread of its own, logged as ``system/...`` at the step the loop logged last.
    ``flush_interval``: how long logged keys other than ``monitor`` wait at most before they are sent (2
    seconds; the monitored value goes at once).
    ``decision_timeout``: how long ``should_stop()``/``should_checkpoint()`` wait at most for the verdict
    on the monitored step logged last (see :meth:`Run.should_stop`). ``transport``: send through this
    ``plateau_tracker._transport.Transport`` instead of one made from ``url`` and ``token`` (tests, a proxy's
    settings).

    Every parameter after ``project`` is keyword-only. The positional form of earlier releases
    (``init("proj", "exp", None, {...}, "val/loss")``) still works, with a ``DeprecationWarning``.
    """
    if positional:
        given = _once_positional(positional)
        experiment = given.get("experiment", experiment)
        name = given.get("name", name)
        config = given.get("config", config)
        monitor = given.get("monitor", monitor)
        mode = given.get("mode", mode)
        rules = given.get("rules", rules)
        url = given.get("url", url)
    project, experiment, name, tags, mode = _from_environment(project, experiment, name, tags, mode)
    policy = _checked_policy(monitor, mode, rules, combine, reduce, reduce_timeout_s)
    if policy is not None and rules is None and planned_steps is None:
        _say_no_plan()
    disabled = disabled_chosen()
    offline = transport is None and (disabled or offline_chosen())
    spool = spool and not disabled
    if transport is None:
        resolved_url = url or os.environ.get("PLATEAU_URL") or DEFAULT_URL
        chosen = OfflineTransport if offline else Transport
        transport = chosen(resolved_url, token=token or os.environ.get("PLATEAU_TOKEN"))
    else:
        resolved_url = transport.url
    detected_rank, detected_world = detect_rank_world()
    rank = detected_rank if rank is None else rank
    world_size = detected_world if world_size is None else world_size
    body: dict[str, Any] = {
        "project": project,
        "experiment": experiment,
        "run_key": run_key or shared_run_key(world_size),
        "config": {**({CONTEXT_KEY: run_context()} if record_context else {}), **dict(config or {})},
        "tags": list(tags),
        "world_size": world_size,
    }
    if name is not None:
        body["name"] = name
    if planned_steps is not None:
        body["planned_steps"] = planned_steps
    if policy is not None:
        body["policy"] = policy
    disk = (
        Spool(
            Path(spool_dir) if spool_dir is not None else default_spool_dir(),
            body["run_key"],
            url=resolved_url,
            create_body=body,
            max_bytes=spool_max_bytes,
        )
        if spool
        else None
    )
    run = Run(
        transport=transport,
        create_body=body,
        monitor=monitor,
        rank=rank,
        flush_interval=flush_interval,
        max_pending=max_pending,
        exit_timeout=exit_timeout,
        decision_timeout=decision_timeout,
        spool=disk,
        away=AwayVerdicts.for_policy(policy) if rank == 0 else None,
    )
    if offline:
        run._sender.go_offline_by_choice(discard=disabled)
    if disabled:
        if run._away is not None:
            run._away.said_elsewhere()
        _say_disabled()
    elif offline:
        where = f"the spool at {disk.dir}" if disk is not None else "memory only (spool=False)"
        logger.warning(
            "plateau: PLATEAU_OFFLINE is set: run %s sends nothing and goes to %s; its stop and checkpoint "
            "are judged in this process; `plateau sync` sends it to %s later",
            body["run_key"],
            where,
            resolved_url,
        )
    run._start(0.0 if offline else wait)
    if system_metrics and not disabled:
        run.sample_system(system_metrics)
    return run


def _from_environment(
    project: str | None,
    experiment: str | None,
    name: str | None,
    tags: Sequence[str],
    mode: ModeChoice,
) -> tuple[str, str, str | None, Sequence[str], ModeChoice]:
    """What the call leaves out, from the environment, by the convention of W&B and MLflow:
    ``PLATEAU_PROJECT``, ``PLATEAU_EXPERIMENT`` (else ``default``), ``PLATEAU_RUN_NAME``, ``PLATEAU_TAGS``
    (comma-separated) and ``PLATEAU_MODE``. A project from neither is a ``TypeError``, as a missing
    argument is."""
    project = project or os.environ.get("PLATEAU_PROJECT") or None
    if project is None:
        raise TypeError("plateau_tracker.init() needs a project: init(project=...) or $PLATEAU_PROJECT")
    experiment = experiment or os.environ.get("PLATEAU_EXPERIMENT") or "default"
    name = name if name is not None else (os.environ.get("PLATEAU_RUN_NAME") or None)
    if not tags:
        tags = [tag.strip() for tag in os.environ.get("PLATEAU_TAGS", "").split(",") if tag.strip()]
    if mode == "auto" and os.environ.get("PLATEAU_MODE"):
        mode = os.environ["PLATEAU_MODE"]  # type: ignore[assignment]  # checked by resolve_mode
    return project, experiment, name, tags, mode


def _say_disabled() -> None:
    """Said once a process: a run that keeps nothing must not look like one that lost its points."""
    global _said_disabled
    if not _said_disabled:
        _said_disabled = True
        logger.warning(
            "plateau: PLATEAU_DISABLED is set: runs send and keep nothing; should_checkpoint() still marks "
            "each new best, and should_stop() answers from the rules this process judges itself (patience, "
            "non_finite, threshold)"
        )


def _say_no_plan() -> None:
    """The default policy without ``planned_steps``: judged against a plan it has to guess, said once."""
    global _said_no_plan
    if _said_no_plan:
        return
    _said_no_plan = True
    logger.warning(
        "plateau: no planned_steps given: the default policy judges a run against its plan (the last step "
        "it will log); without one it judges the pace one doubling of the run at a time, and a run that logs "
        "no validation loss either by patience (10 evaluations), which stops runs that would climb again "
        "late; pass planned_steps=N (README: Declare the plan)"
    )


def _once_positional(positional: tuple[Any, ...]) -> dict[str, Any]:
    """The deprecated positional form's arguments by name, with a ``DeprecationWarning`` at the caller."""
    if len(positional) > len(_ONCE_POSITIONAL):
        raise TypeError(f"init() takes 1 positional argument (project), {1 + len(positional)} given")
    warnings.warn(
        "plateau_tracker.init: pass every argument after project by name "
        f"({', '.join(f'{n}=' for n in _ONCE_POSITIONAL[: len(positional)])}); the positional form "
        "will be removed",
        DeprecationWarning,
        stacklevel=3,
    )
    return dict(zip(_ONCE_POSITIONAL[: len(positional)], positional, strict=True))


def _checked_policy(
    monitor: str | None,
    mode: ModeChoice,
    rules: Sequence[Mapping[str, Any]] | None,
    combine: Combine,
    reduce: Reduce,
    reduce_timeout_s: float | None = None,
) -> dict[str, Any] | None:
    """The policy the run asks for (None without a monitor), its shape checked in this process: before
    any collective or connection, so a typo fails fast, the same on every rank, tracker or not."""
    if monitor is None:
        return None
    policy: dict[str, Any] = {
        "monitor": monitor,
        "mode": resolve_mode(monitor, mode),
        "combine": combine,
        "reduce": reduce,
    }
    if reduce_timeout_s is not None:
        policy["reduce_timeout_s"] = reduce_timeout_s
    if rules is not None:
        policy["rules"] = list(rules)
    check_policy(policy)
    if rules is not None:
        policy["rules"] = [dict(rule) for rule in rules]
    return policy
