"""Builds the ASGI application: admin API, health, admin UI and (later) the MCP endpoint."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from registry import __version__
from registry.api import admin, problems
from registry.api.entries import entry_router
from registry.catalog.specs import KIND_BY_COLLECTION
from registry.runtime import Registry


def create_app(registry: Registry) -> FastAPI:
    app = FastAPI(
        title="mcp-registry",
        version=__version__,
        summary="Versioned prompts, resources and tools, served to every agent over MCP.",
        docs_url="/docs",
        openapi_url="/openapi.json",
    )
    app.state.registry = registry
    problems.install(app)

    for collection, kind in KIND_BY_COLLECTION.items():
        app.include_router(entry_router(collection, kind), prefix="/api/v1")
    app.include_router(admin.router, prefix="/api/v1")

    @app.get("/healthz", tags=["health"], summary="The process is up")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "version": __version__}

    @app.get("/readyz", tags=["health"], summary="The database is reachable and migrated")
    def readyz() -> JSONResponse:
        ok, detail = registry.ready()
        return JSONResponse({"status": "ok" if ok else "unavailable", "detail": detail}, status_code=200 if ok else 503)

    from registry.ui import mount_admin_ui

    mount_admin_ui(app)
    return app
