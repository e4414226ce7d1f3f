"""Builds the ASGI application: the MCP endpoints, the admin API, health and the admin UI.

``/mcp`` (and the legacy ``/sse`` + ``/messages``) are routed before FastAPI: they are the
agents' hot path and need none of FastAPI's per-request machinery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.telemetry import TelemetryConfig

from registry import __version__
from registry import tracing as registry_tracing
from registry.api import admin, docs, models, oauth_metadata, problems
from registry.api.audit import router as audit_router
from registry.api.auth import ViewerPrincipal
from registry.api.bundles import bundle_path
from registry.api.bundles import router as bundles_router
from registry.api.entries import entry_router
from registry.api.events import router as events_router
from registry.api.guard import RequestGuard
from registry.api.reviews import router as reviews_router
from registry.api.teams import router as teams_router
from registry.api.usage import router as usage_router
from registry.catalog.specs import KIND_BY_COLLECTION
from registry.config import SettingsError, check_server_settings
from registry.events.deliverer import EventDeliverer
from registry.mcp.http_common import Receive, Scope, SendFn
from registry.mcp.runtime import McpRuntime
from registry.runtime import Registry, attach
from registry.ui import mount_admin_ui
from registry.webhooks import parse_networks

if TYPE_CHECKING:
    from registry.tracing.sdk import Tracing

log = logging.getLogger("registry")


class RegistryApp:
    """The ASGI entry point: MCP paths go straight to their transports, the rest to FastAPI."""

    def __init__(self, api: FastAPI, mcp: McpRuntime) -> None:
        self.api = api
        self.mcp = mcp
        self.registry: Registry = mcp.registry
        self._routes: dict[str, Callable[[Scope, Receive, SendFn], Awaitable[None]]] = {
            "/mcp": mcp.streamable_http,
            "/mcp/": mcp.streamable_http,
            "/sse": mcp.legacy_sse.stream,
            "/messages": mcp.legacy_sse.messages,
            "/messages/": mcp.legacy_sse.messages,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: SendFn) -> None:
        if scope["type"] == "http":
            handler = self._routes.get(scope["path"])
            if handler is not None:
                await handler(scope, receive, send)
                return
        await self.api(scope, receive, send)


#: Probes, not traced: one every few seconds would drown the backend (README, Tracing).
UNTRACED_PATHS = frozenset({"/healthz", "/readyz"})


def _telemetry(tracing: Tracing | None) -> TelemetryConfig:
    """FastAPI's own OpenTelemetry instrumentation of the admin API and the web UI: a ``SERVER``
    span per request named ``{method} {http.route}`` (HTTP semantic conventions; parent from the
    request's ``traceparent``), on this process's tracer provider when tracing is on. Off
    otherwise, whatever global provider a library may have set. Its HTTP metrics, log records and
    per-step spans stay off: one span per request, and ``/metrics`` has the HTTP figures. (MCP
    requests never reach FastAPI: their spans come from the dispatcher, one per JSON-RPC request.)"""
    if tracing is None:
        return {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}
    return {
        "tracer_provider": tracing.provider,
        "metrics": False,
        "logs": False,
        "operation_spans": False,
        "exclude": lambda scope: scope.get("path") in UNTRACED_PATHS,
    }


async def _start_mcp_once_ready(
    registry: Registry, mcp: McpRuntime, events: EventDeliverer | None, poll_s: float = 1.0
) -> None:
    while not (await asyncio.to_thread(registry.ready))[0]:
        await asyncio.sleep(poll_s)
    await mcp.start()
    if events is not None:
        await events.start()


def event_deliverer(registry: Registry, mcp: McpRuntime) -> EventDeliverer | None:
    """The change-event deliverer of this process (None: ``REGISTRY_EVENTS=off``), woken by every
    change the MCP feed reads (any replica's) and by this process's writes."""
    settings = registry.settings
    if not settings.events_enabled:
        return None
    deliverer = EventDeliverer(
        registry.db,
        registry.secrets,
        settings.limits,
        allowed_networks=parse_networks(settings.webhook_allowed_networks),
        lease_s=settings.events_lease_s,
        retry_base_s=settings.events_retry_base_s,
        retry_max_s=settings.events_retry_max_s,
        max_attempts=settings.events_max_attempts,
        poll_s=settings.change_poll_s,
        on_attempt=lambda outcome: mcp.metrics.event_deliveries.labels(outcome).inc(),
    )
    mcp.metrics.event_lease_held.set_function(lambda: 1.0 if deliverer.held is not None else 0.0)
    mcp.change_observers.append(deliverer.poke)
    registry.catalog.on_change(lambda _change_id: deliverer.poke())
    registry.events.wake = deliverer.poke
    return deliverer


def create_app(registry: Registry, *, freeze_gc: bool = False, tracing: Tracing | None = None) -> RegistryApp:
    """``freeze_gc``: a dedicated server process freezes its long-lived heap after start-up.
    ``tracing``: OpenTelemetry's providers (tests pass their own); None: from the ``OTEL_*``
    variables, off unless they ask for it (``registry.tracing``), and then stopped with the app.
    Settings no server may run with raise ``SettingsError`` here (``serve`` checks them first)."""
    check_server_settings(registry.settings)
    owned = tracing is None
    if owned:
        try:
            tracing = registry_tracing.from_environment(trace_arguments=registry.settings.trace_arguments)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
    mcp = McpRuntime(registry, freeze_gc=freeze_gc, tracing=tracing)
    events = event_deliverer(registry, mcp)
    # /readyz checks on threads of its own: a default pool busy with other work must not make the
    # probe answer "unavailable", and probes stuck on a frozen database must not take others' threads.
    ready_threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="readyz")

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # On a database that is not migrated yet the process must still come up, so /readyz can
        # answer 503 (and /healthz 200) until `db upgrade` has run. The MCP side reads the change
        # log as it starts, so it then starts in the background once the database is ready.
        if owned and tracing is not None:  # this process's exporter process (one per worker)
            tracing.start()
        ready, detail = await asyncio.to_thread(registry.ready)
        waiting: asyncio.Task[None] | None = None
        if ready:
            await mcp.start()
            if events is not None:
                await events.start()
        else:
            log.warning("database not ready (%s); the MCP endpoint starts once it is", detail)
            waiting = asyncio.create_task(_start_mcp_once_ready(registry, mcp, events))
        try:
            yield
        finally:
            if waiting is not None and not waiting.done():
                waiting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiting
            else:
                if events is not None:
                    await events.stop()
                await mcp.stop()
            ready_threads.shutdown(wait=False, cancel_futures=True)
            if owned and tracing is not None:  # what is still queued goes out before the process ends
                await asyncio.to_thread(tracing.shutdown)

    app = FastAPI(
        title="mcp-registry",
        version=__version__,
        summary="Versioned prompts, resources and tools, served to every agent over MCP.",
        # /docs and /redoc come from registry.api.docs: vendored assets, no CDN.
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        lifespan=lifespan,
        telemetry=_telemetry(tracing),
    )
    attach(app, registry)
    app.state.mcp = mcp
    problems.install(app)
    # Token checked, then body size and JSON structure bounded, before FastAPI reads the body.
    app.add_middleware(
        RequestGuard, tokens=registry.tokens, limits=registry.settings.limits, bundle_paths=bundle_path
    )
    docs.install(app)

    for collection, kind in KIND_BY_COLLECTION.items():
        app.include_router(entry_router(collection, kind), prefix="/api/v1")
    app.include_router(admin.router, prefix="/api/v1")
    app.include_router(reviews_router, prefix="/api/v1")
    app.include_router(teams_router, prefix="/api/v1")
    app.include_router(oauth_metadata.router)  # RFC 9728, with single sign-on
    app.include_router(audit_router, prefix="/api/v1")
    app.include_router(usage_router, prefix="/api/v1")
    app.include_router(bundles_router, prefix="/api/v1")  # catalog as code (mcp-registry plan/push/pull)
    app.include_router(events_router, prefix="/api/v1")

    @app.get("/healthz", tags=["health"], summary="The process is up", response_model=models.Health)
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "version": __version__}

    @app.get(
        "/readyz",
        tags=["health"],
        summary="The database is reachable and migrated",
        response_model=models.Readiness,
        responses={503: {"model": models.Readiness, "description": "not ready (the detail says why)"}},
    )
    async def readyz() -> JSONResponse:
        # Answered within about db_ready_timeout_s whatever the database does: a connect to a frozen
        # server takes the whole connect timeout, so the answer does not wait for the worker thread.
        bound = registry.settings.db_ready_timeout_s
        running = asyncio.get_running_loop().run_in_executor(ready_threads, registry.ready)
        try:
            ok, detail = await asyncio.wait_for(running, timeout=bound + 0.1)
        except TimeoutError:
            ok, detail = False, f"database unreachable: no answer within {bound:.1f}s"
        return JSONResponse({"status": "ok" if ok else "unavailable", "detail": detail}, status_code=200 if ok else 503)

    @app.get(
        "/metrics",
        tags=["health"],
        summary="Prometheus metrics (any admin-API token)",
        response_class=PlainTextResponse,
        responses=problems.documented(*problems.ALWAYS),
    )
    def metrics(_principal: ViewerPrincipal) -> Response:
        return Response(mcp.metrics.render(), media_type=mcp.metrics.content_type)

    mount_admin_ui(app)
    return RegistryApp(app, mcp)
