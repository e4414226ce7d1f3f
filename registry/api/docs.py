"""The API reference pages, ``/docs`` (Swagger UI) and ``/redoc``, served from vendored assets.

FastAPI's built-in pages load Swagger UI and ReDoc from a CDN, without integrity checks: on a
machine without internet they are blank, and elsewhere they run third-party code fetched at view
time. These pages use the copies under ``admin_ui/static/vendor/`` (served at ``/ui/vendor/``),
start them from an external script (no inline script), and send a Content-Security-Policy that
allows nothing from other origins.
"""

from __future__ import annotations

from html import escape

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from registry.api import openapi

VENDOR = "/ui/vendor"
#: Swagger UI and ReDoc set inline styles; ReDoc runs its search index in a blob: worker.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff"}


def _page(title: str, openapi_url: str, head: str, body: str) -> HTMLResponse:
    html = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
{head}
</head>
<body data-openapi-url="{escape(openapi_url)}">
{body}
</body>
</html>
"""
    return HTMLResponse(html, headers=_HEADERS)


def install(app: FastAPI, *, openapi_url: str = "/openapi.json") -> None:
    """Serve ``/docs`` and ``/redoc``; create the app with ``docs_url=None, redoc_url=None``. The
    document they show is completed by ``registry.api.openapi`` (bodies, limits, links)."""
    openapi.install(app)
    title = f"{app.title} — API reference"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        head = (
            f'<link rel="icon" type="image/png" href="{VENDOR}/swagger-ui/favicon-32x32.png">\n'
            f'<link rel="stylesheet" href="{VENDOR}/swagger-ui/swagger-ui.css">'
        )
        body = (
            '<div id="swagger-ui"></div>\n'
            f'<script src="{VENDOR}/swagger-ui/swagger-ui-bundle.js"></script>\n'
            '<script src="/ui/docs/swagger-init.js"></script>'
        )
        return _page(title, openapi_url, head, body)

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        body = (
            '<div id="redoc-container"></div>\n'
            f'<script src="{VENDOR}/redoc/redoc.standalone.js"></script>\n'
            '<script src="/ui/docs/redoc-init.js"></script>'
        )
        return _page(title, openapi_url, "", body)
