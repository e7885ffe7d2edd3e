"""Routes of API v1. Each validates, calls one service, and returns its schema."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Literal

from anyio import to_thread
from fastapi import APIRouter, Depends, Query, Request, Response, status
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from plateau_tracker.server import __version__
from plateau_tracker.server.api import many_ingest
from plateau_tracker.server.api.deps import (
    DatabaseDep,
    DelivererDep,
    IdPath,
    IngestServicesDep,
    ListenerDep,
    NotifierDep,
    PrincipalDep,
    ProjectPath,
    SettingsDep,
    read_project,
    read_run,
    write_project,
    write_run,
)
from plateau_tracker.server.api.fast_ingest import store_batch
from plateau_tracker.server.api.storage_errors import RETRY_AFTER_S
from plateau_tracker.server.schemas._common import Text
from plateau_tracker.server.schemas.away_verdicts import AwayComparison, AwayVerdicts
from plateau_tracker.server.schemas.decisions import DecisionPublic, DecisionsPublic
from plateau_tracker.server.schemas.distributed_health import DistributedHealthPublic
from plateau_tracker.server.schemas.metrics import (
    BatchesAnswer,
    HistoryColumns,
    HistoryPage,
    IngestResult,
    KeysPublic,
    MetricBatch,
    SeriesPublic,
)
from plateau_tracker.server.schemas.projects import Deleted, ProjectsPublic
from plateau_tracker.server.schemas.runs import RunCreate, RunFinish, RunPublic, RunsPublic, RunStatus
from plateau_tracker.server.schemas.summary import RunSummaryPublic, SummaryUpdate
from plateau_tracker.server.schemas.webhooks import (
    DeliveriesPublic,
    WebhookCreate,
    WebhookPublic,
    WebhooksPublic,
)
from plateau_tracker.server.services import (
    away_verdicts,
    crashes,
    decisions,
    deletion,
    distributed_health,
    history,
    projects,
    runs,
    series,
    summary,
    webhooks,
)
from plateau_tracker.server.services.auth import check_project
from plateau_tracker.server.services.storage_health import STORAGE
from plateau_tracker.server.services.webhook_targets import Allowed, RefusedTargetError
from plateau_tracker.server.services.webhook_targets import check as check_target

router = APIRouter(prefix="/api/v1")

# Every integer the API accepts is bounded by what the stores hold (a 422 naming it, not a 500).
MAX_STEP = 2**62
MAX_RANK = 100_000
# The health ping's own thread: it answers while every worker thread ingests.
_HEALTH_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="plateau-health")
# An open long-poll checks its caller's token again this often: with the token cache (auth.CACHE_S), a
# token revoked mid-poll ends it within the 5 s the README promises.
REVALIDATE_S = 1.0
# History pages: JSON is built and parsed per point, packed columns are not.
MAX_JSON_PAGE = 100_000
MAX_BINARY_PAGE = 1_000_000


@router.get("/health", tags=["health"])
async def get_server_health(database: DatabaseDep, listener: ListenerDep) -> JSONResponse:
    # On the event loop, not in the worker threads: it must answer while they ingest a large batch (the
    # database ping runs in a thread of its own).
    # "store" tells a command whether this tracker is the one its settings name (tracker/discovery.py);
    # "wakeups" how other replicas' changes reach long-polls: notifications, or polling while they cannot;
    # "storage" whether the database answers ("ok"), answers but a write failed on storage lately (the
    # cause: "disk_full"...), or does not ("unreachable": the answer is then a 503).
    wakeups = "local" if listener is None else ("notify" if listener.up else "poll")
    storage = await asyncio.get_running_loop().run_in_executor(_HEALTH_THREAD, STORAGE.state, database)
    body: dict[str, str | float] = {
        "status": "ok" if storage.cause is None else ("degraded" if storage.reachable else "unavailable"),
        "version": __version__,
        "database": database.engine.dialect.name,
        "store": database.identity,
        "wakeups": wakeups,
        "storage": storage.cause or "ok",
    }
    if storage.seconds_ago is not None and storage.reachable:
        body["storage_failed_s_ago"] = storage.seconds_ago
    headers = {} if storage.reachable else {"Retry-After": str(RETRY_AFTER_S)}
    return JSONResponse(body, status_code=200 if storage.reachable else 503, headers=headers)


@router.post("/runs", status_code=status.HTTP_201_CREATED, tags=["runs"])
def create_run(
    request: RunCreate, response: Response, database: DatabaseDep, principal: PrincipalDep
) -> RunPublic:
    """Create a run; with the ``run_key`` of an existing run of the project, join it (200)."""
    check_project(principal, request.project, write=True)
    run = runs.create_or_join(database, request)
    if run.joined:
        response.status_code = status.HTTP_200_OK
    return run


_RUN_FILTERS = frozenset({"project", "experiment", "status", "name", "tag", "limit", "offset", "before"})


def refuse_unknown_parameters(request: Request, known: frozenset[str]) -> None:
    """A 422 naming a query parameter the route does not take: a filter misspelt (``?tags=x``) must not
    answer every run as if it had matched."""
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        raise RequestValidationError(
            [
                {
                    "type": "extra_forbidden",
                    "loc": ("query", name),
                    "msg": f"unknown parameter; this route takes {', '.join(sorted(known))}",
                    "input": request.query_params.get(name),
                }
                for name in unknown
            ]
        )


@router.get("/runs", tags=["runs"])
def list_runs(
    request: Request,
    database: DatabaseDep,
    principal: PrincipalDep,
    project: Annotated[Text | None, Query(max_length=200)] = None,
    experiment: Annotated[Text | None, Query(max_length=200)] = None,
    status: Annotated[
        list[RunStatus] | None, Query(description="runs in any of these statuses (repeat the parameter)")
    ] = None,
    name: Annotated[Text | None, Query(max_length=200, description="runs whose name contains this")] = None,
    tag: Annotated[
        list[Annotated[Text, Query(max_length=200)]] | None,
        Query(max_length=20, description="runs holding this tag (repeat the parameter: every one)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_STEP)] = 0,
    before: Annotated[
        int | None, Query(ge=1, le=MAX_STEP, description="the page after this run id (the last page's next)")
    ] = None,
) -> RunsPublic:
    """Runs, newest first, each with its latest decision; a project token sees its own project's runs only,
    an operator token every project's."""
    refuse_unknown_parameters(request, _RUN_FILTERS)
    if principal is not None and principal.project is not None:
        check_project(principal, project or principal.project, write=False)
        project = principal.project
    return runs.list_runs(
        database,
        project=project,
        experiment=experiment,
        status=status,
        name=name,
        tags=tag or (),
        limit=limit,
        offset=offset,
        before=before,
    )


@router.get("/projects", tags=["runs"])
def list_projects(database: DatabaseDep, principal: PrincipalDep) -> ProjectsPublic:
    """Projects with their experiments and run counts; a project token sees its own project only, an
    operator token every project."""
    return projects.list_projects(database, project=None if principal is None else principal.project)


@router.get("/runs/{run_id}", dependencies=[Depends(read_run)], tags=["runs"])
def get_run(run_id: int, database: DatabaseDep) -> RunPublic:
    return runs.get(database, run_id)


@router.delete("/runs/{run_id}", dependencies=[Depends(write_run)], tags=["runs"])
def delete_run(run_id: int, database: DatabaseDep) -> Deleted:
    """Delete the run with its points, series, decisions and webhook deliveries; its trainer is answered
    404 from then on."""
    return deletion.delete_run(database, run_id)


@router.delete(
    # ``:path``: an experiment's name may hold a slash, which the router would otherwise split on.
    "/projects/{project}/experiments/{experiment:path}",
    dependencies=[Depends(write_project)],
    tags=["runs"],
)
def delete_experiment(
    project: ProjectPath,
    experiment: Annotated[Text, PathParam(min_length=1, max_length=200)],
    database: DatabaseDep,
) -> Deleted:
    """Delete the experiment and every run in it, each with everything it holds."""
    return deletion.delete_experiment(database, project, experiment)


@router.post(
    "/runs/{run_id}/heartbeat",
    dependencies=[Depends(write_run)],
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["runs"],
)
def send_heartbeat(run_id: int, database: DatabaseDep) -> None:
    """The trainer is alive though it logs nothing now (the SDK sends one every minute of silence): the
    run is not marked crashed, and a run marked crashed is running again."""
    crashes.heartbeat(database, run_id)


@router.post("/runs/{run_id}/finish", dependencies=[Depends(write_run)], tags=["runs"])
def finish_run(
    run_id: int, request: RunFinish, database: DatabaseDep, notifier: NotifierDep, deliverer: DelivererDep
) -> RunPublic:
    run = runs.finish(database, run_id, request)
    notifier.notify(run_id)
    deliverer.poke()
    return run


@router.get("/runs/{run_id}/summary", dependencies=[Depends(read_run)], tags=["runs"])
def get_summary(run_id: int, database: DatabaseDep) -> RunSummaryPublic:
    """The figures the trainer reported (model complexity, time per step) and the convergence times
    derived from the decisions: to the best step, to the stop, per step."""
    return summary.read(database, run_id)


@router.patch("/runs/{run_id}/summary", dependencies=[Depends(write_run)], tags=["runs"])
def update_summary(run_id: int, request: SummaryUpdate, database: DatabaseDep) -> RunSummaryPublic:
    """Merge figures into the run's summary key by key; a key set to null is removed."""
    return summary.update(database, run_id, request)


@router.post(
    "/runs/{run_id}/metrics", dependencies=[Depends(write_run)], response_model=IngestResult, tags=["metrics"]
)
def ingest_metrics(run_id: int, batch: MetricBatch, services: IngestServicesDep) -> Response:
    """Store a batch of points; the answer carries the run's latest decision. (Served by
    :class:`~tracker.api.fast_ingest.FastIngest` ahead of FastAPI, errors included; this route declares the
    endpoint and its body, and answers a run id past what the stores hold.)"""
    return Response(content=store_batch(services, run_id, batch), media_type="application/json")


@router.post(
    many_ingest.PATH.removeprefix("/api/v1"),
    response_model=BatchesAnswer,
    tags=["metrics"],
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/x-ndjson": {"schema": {"$ref": "#/components/schemas/RunBatch"}}},
        }
    },
)
async def ingest_batches(request: Request, principal: PrincipalDep, services: IngestServicesDep) -> Response:
    """Store the batches of many runs: NDJSON, one run's batch per line as its own route takes it, with
    ``run_id``. Each line is answered on its own, in order; one refused line refuses nothing else.
    (Served by :class:`~tracker.api.fast_ingest.FastIngest` ahead of FastAPI; this route declares it.)"""
    body = await request.body()
    authenticator = request.app.state.authenticator
    answer = await to_thread.run_sync(many_ingest.store_lines, services, authenticator, principal, body)
    return Response(content=answer, media_type="application/json")


@router.get("/runs/{run_id}/decision", dependencies=[Depends(read_run)], tags=["decisions"])
async def get_decision(
    run_id: int,
    request: Request,
    database: DatabaseDep,
    settings: SettingsDep,
    notifier: NotifierDep,
    listener: ListenerDep,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_STEP, description="wait for a decision newer than this seq")
    ] = None,
    step: Annotated[
        int | None, Query(ge=0, le=MAX_STEP, description="wait for the verdict on exactly this step")
    ] = None,
    wait: Annotated[float, Query(ge=0, description="seconds to wait at most")] = 0.0,
) -> DecisionPublic:
    """The latest decision; with ``after`` or ``step``, long-poll up to ``wait`` seconds for it. A token
    revoked or expired while the poll is open ends it (401) within the promised bound."""
    deadline = time.monotonic() + min(wait, settings.max_wait_seconds)
    first = True
    while True:
        if not first:  # the dependency checked the caller once; an open poll checks again each pass
            await read_run(run_id, request)
        first = False
        event = notifier.event(run_id)
        decision, ready = await to_thread.run_sync(
            lambda: decisions.poll(database, run_id, after=after, step=step)
        )
        remaining = deadline - time.monotonic()
        if ready or remaining <= 0:
            return decision
        # With notifications up, every change of the run wakes the event (and their loss wakes it too):
        # no look at the database until then. Otherwise look again on the fallback timer. Either way at
        # least every REVALIDATE_S, to check the caller again.
        listening = listener is not None and listener.up
        pause = remaining if listening else min(remaining, settings.longpoll_fallback_s)
        await notifier.wait(event, min(pause, REVALIDATE_S))


@router.get("/runs/{run_id}/decisions", dependencies=[Depends(read_run)], tags=["decisions"])
def list_decisions(
    run_id: int,
    database: DatabaseDep,
    step: Annotated[int | None, Query(ge=0, le=2**62, description="only the decisions about this step")] = (
        None
    ),
) -> DecisionsPublic:
    """Every decision of the run, oldest first, each with its rule, sentence and evidence."""
    return decisions.history(database, run_id, step=step)


@router.post("/runs/{run_id}/away-verdicts", dependencies=[Depends(write_run)], tags=["decisions"])
def compare_away_verdicts(
    run_id: int, request: AwayVerdicts, database: DatabaseDep, deliverer: DelivererDep
) -> AwayComparison:
    """Compare what the SDK answered alone (while the tracker had not judged those steps) with the run's
    decisions there; each step judged differently becomes an ``sdk_disagreed`` alert, once."""
    comparison, deliveries = away_verdicts.compare(database, run_id, request)
    if deliveries:
        deliverer.poke()
    return comparison


@router.get("/runs/{run_id}/keys", dependencies=[Depends(read_run)], tags=["metrics"])
def list_keys(run_id: int, database: DatabaseDep) -> KeysPublic:
    return history.keys(database, run_id)


@router.get(
    "/runs/{run_id}/history",
    dependencies=[Depends(read_run)],
    response_model=HistoryPage | HistoryColumns,
    responses={
        200: {
            "content": {
                "application/octet-stream": {
                    "schema": {"type": "string", "format": "binary"},
                    "description": "form=binary: the steps (int64), values and wall times (float64), "
                    "little-endian, one column after the other",
                }
            },
            "headers": {
                "X-Plateau-Points": {"description": "form=binary: the page's number of points"},
                "X-Plateau-Next-Step": {"description": "form=binary: the next page's start_step, if any"},
            },
        }
    },
    tags=["metrics"],
)
def get_history(
    run_id: int,
    database: DatabaseDep,
    key: Annotated[Text, Query(min_length=1, max_length=250)],
    rank: Annotated[int, Query(ge=0, le=MAX_RANK)] = 0,
    start_step: Annotated[int, Query(ge=0, le=MAX_STEP)] = 0,
    limit: Annotated[
        int, Query(ge=1, le=MAX_BINARY_PAGE, description="at most 100,000 in JSON, 1,000,000 in binary")
    ] = 10_000,
    form: Annotated[
        Literal["points", "columns", "binary"],
        Query(
            description="points: a list of {step, value, wall_time}; columns: steps, values, wall_times; "
            "binary: those columns packed (application/octet-stream), for long reads"
        ),
    ] = "points",
) -> Response:
    """A page of one key's points in step order; follow ``next_step`` for the rest."""
    if form == "binary":
        body, count, next_step = history.page_binary(
            database, run_id, key, rank=rank, start_step=start_step, limit=limit
        )
        headers = {"X-Plateau-Points": str(count)}
        if next_step is not None:
            headers["X-Plateau-Next-Step"] = str(next_step)
        return Response(content=body, media_type="application/octet-stream", headers=headers)
    if limit > MAX_JSON_PAGE:
        raise RequestValidationError(
            [
                {
                    "type": "less_than_equal",
                    "loc": ("query", "limit"),
                    "msg": f"Input should be less than or equal to {MAX_JSON_PAGE} (form={form}; "
                    f"form=binary takes up to {MAX_BINARY_PAGE})",
                    "input": limit,
                    "ctx": {"le": MAX_JSON_PAGE},
                }
            ]
        )
    body = history.page_json(
        database, run_id, key, rank=rank, start_step=start_step, limit=limit, columns=form == "columns"
    )
    return Response(content=body, media_type="application/json")


@router.get("/runs/{run_id}/health", dependencies=[Depends(read_run)], tags=["distributed"])
def get_distributed_health(
    run_id: int, database: DatabaseDep, last: Annotated[int, Query(ge=1, le=10_000)] = 20
) -> DistributedHealthPublic:
    """Distributed health: per-rank medians of the ``dist/`` figures, the straggler verdict with its
    evidence, the staleness histogram per worker, and the run's alerts."""
    return distributed_health.summary(database, run_id, last=last)


@router.post(
    "/projects/{project}/webhooks",
    dependencies=[Depends(write_project)],
    status_code=status.HTTP_201_CREATED,
    tags=["webhooks"],
)
async def create_webhook(
    project: ProjectPath, request: WebhookCreate, database: DatabaseDep, settings: SettingsDep
) -> WebhookPublic:
    """Subscribe ``url`` to the project's ``events``; each delivery is signed with ``secret``. The URL must
    lead to public addresses only (checked again at every delivery), unless the operator allows its host
    or network (``PLATEAU_WEBHOOK_ALLOW``); a 422 names the address refused."""
    await to_thread.run_sync(lambda: webhooks.require_project(database, project))
    allowed = Allowed.parse(settings.webhook_allow)
    try:
        await to_thread.run_sync(lambda: check_target(str(request.url), allowed))
    except RefusedTargetError as exc:
        raise RequestValidationError(
            [{"type": "value_error", "loc": ("body", "url"), "msg": str(exc), "input": str(request.url)}]
        ) from None
    return await to_thread.run_sync(lambda: webhooks.create(database, project, request))


@router.get("/projects/{project}/webhooks", dependencies=[Depends(read_project)], tags=["webhooks"])
def list_webhooks(project: ProjectPath, database: DatabaseDep) -> WebhooksPublic:
    return webhooks.list_hooks(database, project)


@router.delete(
    "/projects/{project}/webhooks/{webhook_id}",
    dependencies=[Depends(write_project)],
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["webhooks"],
)
def delete_webhook(project: ProjectPath, webhook_id: IdPath, database: DatabaseDep) -> None:
    webhooks.delete(database, project, webhook_id)


@router.get(
    "/projects/{project}/webhooks/{webhook_id}/deliveries",
    dependencies=[Depends(read_project)],
    tags=["webhooks"],
)
def list_deliveries(
    project: ProjectPath,
    webhook_id: IdPath,
    database: DatabaseDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_STEP)] = 0,
) -> DeliveriesPublic:
    """The delivery log: every attempt's outcome, newest first."""
    return webhooks.deliveries(database, project, webhook_id, limit=limit, offset=offset)


@router.get(
    "/runs/{run_id}/series", dependencies=[Depends(read_run)], response_model=SeriesPublic, tags=["metrics"]
)
def get_series(
    run_id: int,
    database: DatabaseDep,
    key: Annotated[Text, Query(min_length=1, max_length=250)],
    rank: Annotated[int, Query(ge=0, le=MAX_RANK)] = 0,
    points: Annotated[int, Query(ge=4, le=100_000, description="most points to return")] = 2000,
) -> Response:
    """A key's curve for drawing, downsampled by min/max buckets (first, last and extremes kept)."""
    body = series.series_json(database, run_id, key, rank=rank, limit=points)
    return Response(content=body, media_type="application/json")
