"""The admin web UI at ``/ui/``: server-rendered pages over the same catalog and token services
as the REST API. Its templates and static files live in the top-level ``admin_ui/`` folder.

``/ui/vendor/*`` and ``/ui/docs/*`` stay plain static files: the API reference pages (``/docs``,
``/redoc``) load their vendored scripts from there.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import RedirectResponse

from registry.runtime import registry_of
from registry.ui.app import build_ui


def mount_admin_ui(app: FastAPI) -> None:
    app.mount("/ui", build_ui(registry_of(app)), name="admin-ui")

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui/")
