"""The web UI's own ASGI application, mounted at ``/ui``.

A separate FastAPI application (not routes on the API's) because its failures must be HTML
pages, not problem+json, and because its requests are authenticated by session cookie, not by
bearer token (the API's request guard does not apply here; ``UiGuard`` bounds bodies instead).
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp

from registry.catalog.specs import KIND_BY_COLLECTION
from registry.paths import admin_ui_dir
from registry.runtime import Registry
from registry.ui import entries, errors, overview, signin, tokens
from registry.ui.security import UiGuard
from registry.ui.sessions import UiSessionStore
from registry.ui.templating import COLLECTIONS, Pages


def build_ui(registry: Registry) -> ASGIApp:
    ui = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    ui.state.registry = registry
    ui.state.ui_sessions = UiSessionStore(registry.db, registry.tokens, hours=registry.settings.ui_session_hours)
    pages = Pages()
    errors.install(ui, pages)

    static = admin_ui_dir() / "static"
    ui.mount("/static", StaticFiles(directory=static), name="ui-static")
    # Kept at their old places: /docs and /redoc load these.
    ui.mount("/vendor", StaticFiles(directory=static / "vendor"), name="ui-vendor")
    ui.mount("/docs", StaticFiles(directory=static / "docs"), name="ui-docs")

    ui.include_router(signin.router(pages))
    ui.include_router(overview.router(pages))
    ui.include_router(tokens.router(pages))
    titles = dict(COLLECTIONS)
    for collection, kind in KIND_BY_COLLECTION.items():
        ui.include_router(entries.entry_router(pages, collection, kind, titles[collection].removesuffix("s")))
    return UiGuard(ui, body_bytes=registry.settings.limits.body_bytes, refusal=errors.refusal_app(pages))
