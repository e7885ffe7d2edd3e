"""The FastAPI application factory. Nothing happens at import; the database is opened in the lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from plateau_tracker.server import __version__
from plateau_tracker.server.api.deps import IngestServices
from plateau_tracker.server.api.errors import BodyLimitMiddleware, install_error_handlers
from plateau_tracker.server.api.fast_ingest import FastIngest
from plateau_tracker.server.api.openapi import describe, operation_id
from plateau_tracker.server.api.request_guard import RequestGuard, allowed_hosts
from plateau_tracker.server.api.routes import router
from plateau_tracker.server.config import Settings
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.db.prepare import prepare_schema
from plateau_tracker.server.services.auth import Authenticator
from plateau_tracker.server.services.crashes import sweep_forever
from plateau_tracker.server.services.delivery import Deliverer, DeliveryPolicy
from plateau_tracker.server.services.keys import KeyCache
from plateau_tracker.server.services.latest_decisions import LatestDecisions
from plateau_tracker.server.services.notify import RunNotifier
from plateau_tracker.server.services.policies import PolicyCache
from plateau_tracker.server.services.run_memory import RunMemories
from plateau_tracker.server.services.wakeups import Listener
from plateau_tracker.server.services.webhook_targets import Allowed


def create_app(settings: Settings | None = None) -> FastAPI:
    """A tracker app for ``settings`` (read from the environment when omitted)."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        url = settings.resolved_database_url()
        prepare_schema(url)
        database = Database(url, pool_size=settings.db_pool_size)
        app.state.database = database
        app.state.authenticator = Authenticator(database)
        app.state.notifier.bind(asyncio.get_running_loop())
        deliverer = Deliverer(database, _delivery_policy(settings))
        app.state.deliverer = deliverer
        app.state.ingest_services = IngestServices(
            database,
            app.state.keys,
            app.state.notifier,
            deliverer,
            PolicyCache(),
            LatestDecisions(),
            RunMemories(),
        )
        deliverer.start()  # also delivers what a previous process committed but never sent
        listener = None
        if not database.is_sqlite:  # other replicas' changes wake this one's long-polls and webhooks
            notifier = app.state.notifier
            listener = Listener(
                url, on_run=notifier.notify, on_deliveries=deliverer.poke, on_down=notifier.wake_all
            )
            listener.start()
            listener.wait_up(5.0)
        app.state.listener = listener
        sweep = (
            asyncio.create_task(sweep_forever(database, settings.crash_after_s))
            if settings.crash_after_s > 0
            else None
        )
        # Everything made so far (modules, the app, the engine) lives as long as the process: keep it out
        # of the collector's full scans, which otherwise walk it again and again under ingest's churn.
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            if sweep is not None:
                sweep.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweep
            if listener is not None:
                await asyncio.to_thread(listener.stop)
            await deliverer.stop()
            database.dispose()

    app = FastAPI(
        title="Plateau tracker",
        version=__version__,
        description="Runs, metric streams and explained early-stopping decisions.",
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
    )
    describe(app)
    app.state.settings = settings
    app.state.keys = KeyCache()
    app.state.notifier = RunNotifier()
    # The middleware added last runs first: what a browser can forge is refused before anything, and a
    # body declared over the limit before the ingest path reads it.
    app.add_middleware(FastIngest, max_bytes=settings.max_body_bytes)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(RequestGuard, hosts=allowed_hosts(settings.host, settings.allowed_hosts))
    install_error_handlers(app)
    app.include_router(router)
    return app


def _delivery_policy(settings: Settings) -> DeliveryPolicy:
    """How webhooks are delivered, from the settings."""
    return DeliveryPolicy(
        poll_s=settings.webhook_poll_s,
        backoff_base_s=settings.webhook_backoff_base_s,
        backoff_max_s=settings.webhook_backoff_max_s,
        max_attempts=settings.webhook_max_attempts,
        deadline_s=settings.webhook_deadline_s,
        timeout_s=min(10.0, settings.webhook_deadline_s),
        allowed=Allowed.parse(settings.webhook_allow),
    )
