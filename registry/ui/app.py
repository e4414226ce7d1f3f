"""The web UI's own ASGI application, mounted at ``/ui``.

A separate FastAPI application (not routes on the API's) because its failures must be HTML
pages, not problem+json, and because its requests are authenticated by session cookie, not by
bearer token (the API's request guard does not apply here; ``UiGuard`` bounds bodies instead).
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp

from registry.paths import admin_ui_dir
from registry.runtime import Registry, attach
from registry.ui import (
    agents,
    audit,
    bundles,
    editor_routes,
    entries,
    errors,
    events,
    overview,
    reviews,
    signin,
    sso,
    teams,
    tokens,
    tool_test,
    usage,
)
from registry.ui.auth import UPLOAD_FORM_BYTES
from registry.ui.security import UiGuard
from registry.ui.templating import get_pages


def build_ui(registry: Registry) -> ASGIApp:
    ui = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    attach(ui, registry)
    pages = get_pages()
    errors.install(ui, pages)

    static = admin_ui_dir() / "static"
    ui.mount("/static", StaticFiles(directory=static), name="ui-static")
    # Kept at their old places: /docs and /redoc load these.
    ui.mount("/vendor", StaticFiles(directory=static / "vendor"), name="ui-vendor")
    ui.mount("/docs", StaticFiles(directory=static / "docs"), name="ui-docs")

    for module in (signin, sso, overview, tokens, teams, events, agents, bundles, tool_test):
        ui.include_router(module.router)
    for module in (audit, usage, reviews, editor_routes, entries):
        ui.include_router(module.router)
    pages.env.globals["editable_kinds"] = frozenset(editor_routes.FORMS)
    limits = registry.settings.limits
    return UiGuard(
        ui,
        body_bytes=limits.body_bytes,
        refusal=errors.refusal_app(pages),
        upload_paths=frozenset({bundles.UPLOAD_PATH}),
        upload_bytes=limits.bundle_bytes,
        upload_form_bytes=UPLOAD_FORM_BYTES,
    )
