"""Every failure of a ``/ui/`` request becomes a page that says what went wrong, never a traceback.

The admin API answers problem+json; people in a browser get the same words on an HTML page, with
the status code kept (404, 403, 413, 422, 503, ...) so tools and tests can tell them apart.

A refusal is no dead end: the catalog says what it is about (``registry.catalog.errors.Subject``)
and the page links it: the entry, the version, its history, the open change request; for an
entry that does not exist, its list and a search for the name.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp

from registry.catalog.errors import CatalogError, Subject
from registry.db.diskfull import is_full
from registry.db.engine import DatabaseUnavailable, is_unavailable, warn_unavailable
from registry.limits import LimitExceeded
from registry.tokens import TokenRejected
from registry.ui.auth import SignInRequired, UiForbidden, clear_session_cookie
from registry.ui.collections import COLLECTION_OF_KIND
from registry.ui.templating import Pages

log = logging.getLogger("registry.ui")

_TITLES = {
    400: "Bad request",
    403: "Not allowed",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    412: "Changed meanwhile",
    413: "Too large",
    429: "Too many at once",
    422: "Invalid input",
    500: "Something went wrong",
    503: "Temporarily unavailable",
}


def links_for(about: Subject | None) -> list[dict[str, str]]:
    """The way on from a refusal about ``about``: links (``href``, ``text``), most specific first."""
    if about is None:
        return []
    links: list[dict[str, str]] = []
    if about.request_id is not None:
        if about.missing == "request":
            links.append({"href": "/ui/reviews?state=all", "text": "All change requests"})
        else:
            number = about.request_id
            links.append({"href": f"/ui/reviews/{number}", "text": f"Go to change request #{number}"})
    collection = COLLECTION_OF_KIND.get(about.kind or "")
    if collection is None or not about.name:
        return links
    kind_title = (about.kind or "").capitalize()
    if about.missing == "entry":
        search = "?" + urlencode({"q": about.name})
        links.append({"href": f"/ui/{collection}{search}", "text": f"Search {collection} for “{about.name}”"})
        links.append({"href": f"/ui/{collection}", "text": f"All {collection}"})
        return links
    entry = f"/ui/{collection}/{quote(about.name, safe='')}"
    if about.version is not None and about.missing != "version":
        links.append({"href": f"{entry}?version={about.version}", "text": f"Version {about.version} of {about.name}"})
    links.append({"href": entry, "text": f"{kind_title} {about.name}"})
    if about.missing in ("version", "label") or about.version is not None:
        links.append({"href": f"{entry}/history", "text": f"History of {about.name} (every version)"})
    return links


def error_page(pages: Pages, request: Request, status: int, message: str, **extra: Any) -> HTMLResponse:
    title = _TITLES.get(status, "Error")
    return pages.render(
        request, "error.html", {"title": title, "status": status, "message": message, **extra}, status=status
    )


#: The response header naming the sign-in page, on the 401 an htmx request gets without a session.
SIGN_IN_HEADER = "X-Sign-In"


def sign_in_redirect(
    pages: Pages, request: Request, next_path: str, reason: str | None, *, unsaved: bool = False
) -> Response:
    """Where a request without a live session goes: a page is redirected to the sign-in page
    (then back to ``next_path``). An htmx request (a live check while someone types) is not:
    navigating would throw away the page and what was typed into it. It gets a 401 with the
    session-ended alert as its body and the sign-in page in ``X-Sign-In``; ``ui.js`` shows the
    alert where the page has room for it (``#session-ended``, the entry editors) and goes to the
    sign-in page from anywhere else. ``unsaved``: an editor's save was refused (its edits are
    kept in the browser; the sign-in page says so)."""
    params = {"next": next_path}
    if reason:
        params["ended"] = "1"
    if unsaved:
        params["unsaved"] = "1"
    target = "/ui/signin?" + urlencode(params)
    response: Response
    if request.headers.get("hx-request") == "true":
        response = pages.render(
            request,
            "_session_ended.html",
            {"signin_url": target},
            status=401,
            headers={SIGN_IN_HEADER: target, "Cache-Control": "no-store"},
        )
    else:
        response = RedirectResponse(target, status_code=303)
    if reason:
        clear_session_cookie(response, request)
    return response


def refusal_app(pages: Pages) -> Any:
    """What ``UiGuard`` answers a body over the limit with."""

    def build(error: LimitExceeded) -> ASGIApp:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            request = Request(scope, receive)
            await error_page(pages, request, 413, str(error))(scope, receive, send)

        return app

    return build


def install(ui: FastAPI, pages: Pages) -> None:
    @ui.exception_handler(SignInRequired)
    async def _sign_in(request: Request, exc: SignInRequired) -> Response:
        return sign_in_redirect(pages, request, exc.next_path, exc.reason, unsaved=exc.unsaved)

    @ui.exception_handler(UiForbidden)
    async def _forbidden(request: Request, exc: UiForbidden) -> Response:
        return error_page(pages, request, 403, exc.message, links=[exc.link] if exc.link else [])

    @ui.exception_handler(CatalogError)
    async def _catalog(request: Request, exc: CatalogError) -> Response:
        details = [str(e.get("msg", e)) for e in exc.errors or []]
        return error_page(pages, request, exc.status, exc.detail, details=details, links=links_for(exc.about))

    @ui.exception_handler(ClientDisconnect)
    async def _gone(request: Request, exc: ClientDisconnect) -> Response:
        # The browser left while its form was being read (a live check replaced by the next
        # keystroke, a closed tab): nobody waits for an answer, and nothing went wrong here.
        log.debug("client left during %s %s before its body was read", request.method, request.url.path)
        return Response(status_code=499)

    @ui.exception_handler(LimitExceeded)
    async def _limit(request: Request, exc: LimitExceeded) -> Response:
        status = 413 if exc.limit in ("body_bytes", "bundle_bytes") else 400
        return error_page(pages, request, status, str(exc))

    @ui.exception_handler(TokenRejected)
    async def _token(request: Request, exc: TokenRejected) -> Response:
        return error_page(pages, request, 403, exc.reason)

    @ui.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        details = [
            f"{'.'.join(str(p) for p in err.get('loc', ())[1:]) or 'request'}: {err.get('msg', '')}"
            for err in exc.errors()[:10]
        ]
        return error_page(pages, request, 400, "Some of the request's values are not valid.", details=details)

    @ui.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        message = {404: "There is no such page.", 405: "This page does not take that kind of request."}.get(
            exc.status_code, str(exc.detail)
        )
        return error_page(pages, request, exc.status_code, message)

    async def _database(request: Request, exc: Exception) -> Response:
        if is_full(exc):  # logged once per episode by the database layer
            return error_page(
                pages,
                request,
                503,
                "Nothing was saved: the catalog's database or disk is full. Pages can still be read; "
                "try again once an operator has freed space.",
            )
        if is_unavailable(exc):
            warn_unavailable(log, "web UI answers 503", exc)
            return error_page(
                pages, request, 503, "The catalog's database cannot be reached right now. Try again in a moment."
            )
        log.error("database error handling %s %s", request.method, request.url.path, exc_info=exc)
        return error_page(pages, request, 500, "The server could not complete the request (see its log).")

    for error_type in (DatabaseUnavailable, SQLAlchemyError, psycopg.Error, sqlite3.Error):
        ui.add_exception_handler(error_type, _database)

    @ui.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        # Starlette logs the traceback (it re-raises after this answer); the page shows none.
        return error_page(pages, request, 500, "The server could not complete the request (see its log).")
