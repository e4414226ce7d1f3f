"""RFC 9457 problem details for every error the admin API returns."""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

from registry.catalog.errors import CatalogError
from registry.db.engine import DatabaseUnavailable, is_unavailable, warn_unavailable

PROBLEM_JSON = "application/problem+json"
#: What a client is told while the database cannot be reached, and when to try again (seconds).
UNAVAILABLE_DETAIL = "the catalog is temporarily unavailable: its database cannot be reached right now; retry shortly"
RETRY_AFTER_S = 2

log = logging.getLogger("registry.api")


def problem(
    status: int, title: str, detail: str, *, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    body.update({k: v for k, v in extra.items() if v is not None})
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def install(app: FastAPI) -> None:
    @app.exception_handler(CatalogError)
    async def _catalog_error(_request: Request, exc: CatalogError) -> JSONResponse:
        return problem(exc.status, exc.title, exc.detail, errors=exc.errors)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": ".".join(str(p) for p in err.get("loc", ())), "msg": str(err.get("msg", ""))}
            for err in exc.errors()
        ]
        summary = "; ".join(f"{e['loc']}: {e['msg']}" for e in errors[:5])
        return problem(422, "Invalid request", summary or "invalid request", errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        title = {401: "Unauthorized", 403: "Forbidden", 404: "Not found", 405: "Method not allowed"}.get(
            exc.status_code, "Error"
        )
        return problem(exc.status_code, title, str(exc.detail), headers=dict(exc.headers or {}))

    async def _database_error(request: Request, exc: Exception) -> JSONResponse:
        return database_problem(request, exc)

    for error_type in (DatabaseUnavailable, SQLAlchemyError, psycopg.Error, sqlite3.Error):
        app.add_exception_handler(error_type, _database_error)


def database_problem(request: Request, exc: Exception) -> JSONResponse:
    """503 (with Retry-After) while the database cannot be reached; any other database error is a
    fault here: 500, still problem+json, with the traceback in the log."""
    if is_unavailable(exc):
        warn_unavailable(log, "admin API answers 503", exc)
        return problem(503, "Service unavailable", UNAVAILABLE_DETAIL, headers={"Retry-After": str(RETRY_AFTER_S)})
    log.error("database error handling %s %s", request.method, request.url.path, exc_info=exc)
    return problem(500, "Internal error", "the server could not complete the request (see its log)")
