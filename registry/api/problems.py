"""RFC 9457 problem details for every error the admin API returns."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from registry.catalog.errors import CatalogError

PROBLEM_JSON = "application/problem+json"


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
