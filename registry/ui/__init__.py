"""The admin web UI. Its pages and assets live in the top-level ``admin_ui/`` folder."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from registry.paths import admin_ui_dir


def mount_admin_ui(app: FastAPI) -> None:
    static = admin_ui_dir() / "static"
    app.mount("/ui", StaticFiles(directory=static, html=True), name="admin-ui")

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui/")
