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
from registry.runtime import Registry, attach
from registry.ui import agents, bundles, entries, errors, overview, signin, sso, tokens, tool_test
from registry.ui.audit import router as audit_router
from registry.ui.auth import UPLOAD_FORM_BYTES
from registry.ui.editor import EntryForm, editor_router
from registry.ui.prompt_form import PromptForm
from registry.ui.resource_form import ResourceForm
from registry.ui.reviews import router as reviews_router
from registry.ui.security import UiGuard
from registry.ui.sessions import UiSessionStore
from registry.ui.teams import router as teams_router
from registry.ui.templating import COLLECTIONS, Pages
from registry.ui.tool_form import ToolForm
from registry.ui.uploads import UploadStore
from registry.ui.usage import router as usage_router


def build_ui(registry: Registry) -> ASGIApp:
    ui = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    attach(ui, registry)
    ui.state.ui_sessions = UiSessionStore(registry.db, registry.tokens, hours=registry.settings.ui_session_hours)
    ui.state.ui_uploads = UploadStore(registry.db)
    pages = Pages()
    errors.install(ui, pages)

    static = admin_ui_dir() / "static"
    ui.mount("/static", StaticFiles(directory=static), name="ui-static")
    # Kept at their old places: /docs and /redoc load these.
    ui.mount("/vendor", StaticFiles(directory=static / "vendor"), name="ui-vendor")
    ui.mount("/docs", StaticFiles(directory=static / "docs"), name="ui-docs")

    ui.include_router(signin.router(pages))
    ui.include_router(sso.router(pages))
    ui.include_router(overview.router(pages))
    ui.include_router(tokens.router(pages))
    ui.include_router(teams_router(pages))
    ui.include_router(agents.router(pages))
    ui.include_router(bundles.router(pages))
    ui.include_router(tool_test.router(pages))
    ui.include_router(audit_router(pages))
    ui.include_router(usage_router(pages))
    ui.include_router(reviews_router(pages))
    titles = dict(COLLECTIONS)
    forms: dict[str, EntryForm] = {"prompt": PromptForm(), "resource": ResourceForm(), "tool": ToolForm()}
    pages.env.globals["editable_kinds"] = frozenset(forms)
    for collection, kind in KIND_BY_COLLECTION.items():
        title = titles[collection].removesuffix("s")
        form = forms.get(kind)
        if form is not None:
            ui.include_router(editor_router(pages, collection, kind, title, form))
        ui.include_router(entries.entry_router(pages, collection, kind, title))
    limits = registry.settings.limits
    return UiGuard(
        ui,
        body_bytes=limits.body_bytes,
        refusal=errors.refusal_app(pages),
        upload_paths=frozenset({bundles.UPLOAD_PATH}),
        upload_bytes=limits.bundle_bytes,
        upload_form_bytes=UPLOAD_FORM_BYTES,
    )
