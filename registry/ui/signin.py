"""``/ui/signin`` and ``/ui/signout``: a pasted API token becomes a session cookie, and back.

With single sign-on configured for the web UI (``REGISTRY_OIDC_ISSUER`` and
``REGISTRY_OIDC_CLIENT_ID``) the page also offers "Sign in with single sign-on", a link to
``/ui/sso/start`` (``registry/ui/sso.py``), which shows its own errors on this page too.

The sign-in form has a CSRF token of its own (there is no session yet): a random value in a
short-lived cookie and in a hidden field, which must match (double submit). It stops another
site from signing a visitor in as someone else ("login CSRF").
"""

from __future__ import annotations

import hmac
import secrets
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from registry.api.deps import WebSessionsDep, get_registry
from registry.tokens import EXPIRED_TOKEN, INVALID_TOKEN, TokenRejected
from registry.ui.auth import (
    CSRF_FIELD,
    SESSION_COOKIE,
    check_csrf,
    clear_session_cookie,
    is_https,
    read_form,
    set_session_cookie,
    signed_in,
)
from registry.ui.views import View, ViewDep

SIGNIN_COOKIE = "mcpr_ui_signin"
_REASONS = {
    INVALID_TOKEN: "That token is not valid: it is unknown or has been revoked.",
    EXPIRED_TOKEN: "That token has expired. Ask an admin for a new one.",
}


def safe_next(value: str | None) -> str:
    """Only a path of this UI: never another site (``//evil``, ``/\\evil``, ``https://...``)."""
    if not value or not value.startswith("/ui/") or value.startswith("//"):
        return "/ui/"
    if any(c in value for c in "\\\r\n\t") or len(value) > 2000:
        return "/ui/"
    return value


def sso_enabled(request: Request) -> bool:
    """Whether the web UI offers single sign-on (an issuer and the UI's client at it)."""
    settings = get_registry(request).settings
    return bool(settings.oidc_issuer and settings.oidc_client_id)


def signin_page(
    pages: View,
    next_path: str,
    *,
    error: str | None = None,
    notice: str | None = None,
    status: int = 200,
    unsaved: bool = False,
) -> Response:
    """The sign-in page (with a fresh form nonce), showing ``error`` or ``notice`` if given.
    ``unsaved``: an entry editor's save was refused for an ended session; the page says the edits
    were not saved (and ``drafts.js`` that the browser kept them, when it has them)."""
    nonce = secrets.token_urlsafe(24)
    context = {
        "next": next_path,
        "signin_nonce": nonce,
        "error": error,
        "notice": notice,
        "unsaved": unsaved,
        "title": "Sign in",
        "sso": sso_enabled(pages.request),
    }
    response = pages.render("signin.html", context, status=status)
    response.set_cookie(
        SIGNIN_COOKIE,
        nonce,
        max_age=3600,
        path="/ui/signin",
        httponly=True,
        samesite="lax",
        secure=is_https(pages.request),
    )
    return response


router = APIRouter()


@router.get("/signin")
def signin_form(
    pages: ViewDep,
    next: Annotated[str | None, Query(max_length=2000)] = None,
    ended: Annotated[str | None, Query(max_length=8)] = None,
    signed_out: Annotated[str | None, Query(max_length=8)] = None,
    unsaved: Annotated[str | None, Query(max_length=8)] = None,
) -> Response:
    target = safe_next(next)
    if signed_in(pages.request) is not None:
        return RedirectResponse(target, status_code=303)
    notice = None
    if unsaved:
        notice = "Your session ended, so your edits were not saved."
    elif ended:
        notice = "Your session has ended. Sign in again to continue."
    elif signed_out:
        notice = "You are signed out."
    return signin_page(pages, target, notice=notice, unsaved=bool(unsaved))


@router.post("/signin")
async def signin(request: Request, pages: ViewDep, sessions: WebSessionsDep) -> Response:
    form = await read_form(request)
    target = safe_next(_text(form.get("next")))
    nonce = _text(form.get("signin_nonce"))
    expected = request.cookies.get(SIGNIN_COOKIE, "")
    if not nonce or not expected or not hmac.compare_digest(nonce.encode(), expected.encode()):
        return signin_page(
            pages,
            target,
            status=400,
            error="The sign-in form had expired (or cookies are off). Paste your token again.",
        )
    try:
        secret, session = await run_in_threadpool(sessions.sign_in, _text(form.get("token")))
    except TokenRejected as exc:
        return signin_page(pages, target, status=401, error=_REASONS.get(exc.reason, exc.reason))
    response = RedirectResponse(target, status_code=303)
    max_age = max(1, int((session.expires_at - datetime.now(UTC)).total_seconds()))
    set_session_cookie(response, request, secret, max_age)
    response.delete_cookie(SIGNIN_COOKIE, path="/ui/signin", httponly=True, samesite="lax", secure=is_https(request))
    return response


@router.post("/signout")
async def signout(request: Request, sessions: WebSessionsDep) -> Response:
    ui = await run_in_threadpool(signed_in, request)
    response = RedirectResponse("/ui/signin?signed_out=1", status_code=303)
    if ui is not None:
        form = await read_form(request)
        check_csrf(ui, request.headers.get("x-csrf-token") or _text(form.get(CSRF_FIELD)))
        await run_in_threadpool(sessions.sign_out, request.cookies.get(SESSION_COOKIE, ""))
    clear_session_cookie(response, request)
    return response


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
