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
from starlette.routing import Match

from registry.catalog.errors import CatalogError, RequestPending
from registry.db.diskfull import DISK_FULL, FULL_RETRY_AFTER_S, is_full
from registry.db.engine import DatabaseUnavailable, is_unavailable, warn_unavailable

PROBLEM_JSON = "application/problem+json"


class InvalidParameter(CatalogError):
    """A query or path parameter out of bounds that FastAPI's own validation cannot see (a bound
    that is a setting)."""

    status = 422
    title = "Invalid request"


#: What a client is told while the database cannot be reached, and when to try again (seconds).
UNAVAILABLE_DETAIL = "the catalog is temporarily unavailable: its database cannot be reached right now; retry shortly"
RETRY_AFTER_S = 2
#: ... and while the database or its disk is full: writes are refused until an operator frees space
#: (reads keep working).
FULL_DETAIL = (
    f"the catalog cannot store changes right now: its {DISK_FULL}; reads keep working; "
    "retry after an operator has freed space"
)

log = logging.getLogger("registry.api")


#: What each documented error status means on the admin API (the problem's ``detail`` says more).
STATUS_MEANINGS: dict[int, str] = {
    400: "Malformed request: a JSON body too deeply nested or with too many items (the limit is named), "
    "or a malformed If-Match",
    401: "No bearer token, or one that is unknown, revoked or expired",
    403: "The token lacks the scope (or, for a team's entries, the team role) this operation needs",
    404: "No such entry, version, label or token",
    409: "Conflicts with the catalog: the name or resource URI is taken, or the entry is archived",
    412: "If-Match names a version that is no longer the newest: reload and re-apply the edit",
    413: "The request body is larger than REGISTRY_LIMIT_BODY_BYTES",
    422: "Invalid parameters or body: each problem is listed in `errors` (with the limit it hit, if any)",
    503: "The database cannot be reached right now, or (for a change) the database or disk is full: the "
    "detail says which; retry after `Retry-After` seconds",
}


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of an admin operation: its error statuses, each a problem+json."""
    content = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    return {status: {"description": STATUS_MEANINGS[status], "content": content} for status in statuses}


#: Every admin-API operation can answer these (token, scope, database).
ALWAYS = (401, 403, 503)
#: ... and these when it takes a JSON body (structure and size limits, validation).
WITH_BODY = (400, 413, 422)


def problem(
    status: int, title: str, detail: str, *, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    body.update({k: v for k, v in extra.items() if v is not None})
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def install(app: FastAPI) -> None:
    @app.exception_handler(CatalogError)
    async def _catalog_error(_request: Request, exc: CatalogError) -> JSONResponse:
        if isinstance(exc, RequestPending):  # name and link the open request that already asks it
            return problem(
                exc.status,
                exc.title,
                exc.detail,
                change_request_id=exc.request_id,
                change_request=f"/api/v1/change-requests/{exc.request_id}",
            )
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
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        title = {401: "Unauthorized", 403: "Forbidden", 404: "Not found", 405: "Method not allowed"}.get(
            exc.status_code, "Error"
        )
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request))
        return problem(exc.status_code, title, str(exc.detail), headers=headers)

    async def _database_error(request: Request, exc: Exception) -> JSONResponse:
        return database_problem(request, exc)

    for error_type in (DatabaseUnavailable, SQLAlchemyError, psycopg.Error, sqlite3.Error):
        app.add_exception_handler(error_type, _database_error)


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path. Starlette's 405 names the methods of the first
    route whose path matched, and FastAPI makes one route per method: ask every route, per method."""
    routes = request.app.router.routes
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in routes):
            allowed.append(method)
    return allowed


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def database_problem(request: Request, exc: Exception) -> JSONResponse:
    """503 (with Retry-After) while the database cannot be reached or is full (the detail says
    which); any other database error is a fault here: 500, still problem+json, with the traceback
    in the log."""
    if is_full(exc):  # logged once per episode by the database layer
        return problem(503, "Service unavailable", FULL_DETAIL, headers={"Retry-After": str(FULL_RETRY_AFTER_S)})
    if is_unavailable(exc):
        warn_unavailable(log, "admin API answers 503", exc)
        return problem(503, "Service unavailable", UNAVAILABLE_DETAIL, headers={"Retry-After": str(RETRY_AFTER_S)})
    log.error("database error handling %s %s", request.method, request.url.path, exc_info=exc)
    return problem(500, "Internal error", "the server could not complete the request (see its log)")
