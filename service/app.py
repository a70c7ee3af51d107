"""The FastAPI application and `launchbay api`."""

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from fastapi import Depends, FastAPI
from redis import Redis

from service.audit import AuditLog, AuditWriter
from service.db import make_engine, upgrade_database
from service.deps import get_principal
from service.errors import install_error_handlers
from service.executors.registry import make_executor
from service.hardening import harden_service, make_non_dumpable
from service.limits import BodySizeLimit
from service.outages import install_outage_handlers
from service.readiness import CachedDatabaseCheck
from service.reaper import ReaperThread
from service.routes import (
    artifacts,
    audit,
    checkpoints,
    code,
    dry_run,
    events,
    goodput,
    jobs,
    limits,
    log_search,
    logs,
    metrics,
    policies,
    prometheus,
    queue,
    recipes,
    runs,
    stacks,
    system,
    tokens,
    ui,
    webhooks,
    workers,
)
from service.scheduling.dispatcher import DispatcherThread
from service.schemas import ERROR_RESPONSES
from service.settings import Settings, get_settings, removed_variables_note
from service.stream_notifier import StreamNotifier
from service.webhook_delivery import WebhookDispatcher

log = logging.getLogger("launchbay.api")


def make_redis(url: str) -> Redis:
    return Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2, health_check_interval=30)


# The route modules behind a bearer token (all but health and readiness), in this order.
AUTHENTICATED_ROUTES = (
    dry_run,
    jobs,
    runs,
    logs,
    metrics,
    events,
    checkpoints,
    artifacts,
    recipes,
    code,
    limits,
    prometheus,
    tokens,
    workers,
    webhooks,
    audit,
    log_search,
    stacks,
    queue,
    policies,
    goodput,
)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        for note in removed_variables_note(os.environ):
            log.warning("%s", note)
        make_non_dumpable()  # in every API process, however many uvicorn starts
        app.state.settings = settings
        app.state.engine = make_engine(
            settings.resolved_database_url, wait_s=settings.database_wait_s
        )
        app.state.redis = make_redis(settings.redis_url)
        app.state.database_check = CachedDatabaseCheck()
        app.state.executor = make_executor(settings, app.state.redis, app.state.engine)
        reaper = ReaperThread(app.state.engine, app.state.executor, settings)
        if settings.reaper_enabled:
            reaper.start()
        deliveries = WebhookDispatcher(app.state.engine, settings)
        if settings.webhook_delivery_enabled:
            deliveries.start()
        dispatcher = DispatcherThread(app.state.engine, settings)
        dispatcher.start()
        app.state.stream_notifier = StreamNotifier(
            app.state.engine,
            settings.stream_poll_s,
            prefetch=partial(events.prefetch_batch, app.state.engine),
        )
        app.state.stream_notifier.start()
        try:
            yield
        finally:
            await app.state.stream_notifier.stop()
            for thread in (dispatcher, deliveries):
                if thread.is_alive():
                    thread.stop()
            if reaper.is_alive():
                reaper.stop()
            app.state.redis.close()
            app.state.engine.dispose()

    app = FastAPI(title="Launchbay", version="0.1.0", lifespan=lifespan)
    install_error_handlers(app)
    install_outage_handlers(app)
    app.add_middleware(BodySizeLimit, limit_for_path=settings.body_limit_for)
    # Outermost: it sees every refusal, the body-size ones included.
    app.add_middleware(AuditLog, writer=AuditWriter(settings.audit_retention_days))
    # Health and readiness answer anyone; every other route needs a bearer token.
    app.include_router(system.router, responses=ERROR_RESPONSES)
    for module in AUTHENTICATED_ROUTES:
        app.include_router(
            module.router, dependencies=[Depends(get_principal)], responses=ERROR_RESPONSES
        )
    # The dashboard's page and assets hold no data; it calls /v1 with the user's token.
    ui.mount_dashboard(app)
    install_openapi(app)
    return app


def install_openapi(app: FastAPI) -> None:
    """The app's OpenAPI description, with every error answer in JSON: FastAPI gives the
    documented error responses the media type of the route's own answer (text for
    `/metrics`), while the error body is always JSON."""
    make_schema = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = make_schema()
            for path_item in schema.get("paths", {}).values():
                for operation in path_item.values():
                    for status_code, answer in operation.get("responses", {}).items():
                        content = answer.get("content")
                        if str(status_code)[0] in "45" and content:
                            answer["content"] = {"application/json": next(iter(content.values()))}
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def run_api(host: str = "127.0.0.1", port: int = 8000, workers: int = 1) -> None:
    """Apply migrations, then serve until interrupted.

    With `workers` > 1, uvicorn runs that many processes on the one port, each with its own
    engine, reaper thread (several reapers are safe, see service.reaper) and cache of verified
    tokens (a token revoked through one process may work in the others for up to
    `service.auth.TOKEN_CACHE_TTL_S`). The submission rate limit lives in Redis, shared.
    """
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = get_settings()
    upgrade_database(settings.resolved_database_url)
    harden_service(settings.data_dir.resolve(), settings.resolved_database_url)
    log.info("database ready at %s", _redact(settings.resolved_database_url))
    if workers > 1:
        # Each process builds its app from the same environment.
        uvicorn.run(
            "service.app:create_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level="info",
        )
    else:
        uvicorn.run(create_app(settings), host=host, port=port, log_level="info")


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
