"""Who is signed in, what they may do, and whether a form really came from our page.

Route parameters:

- ``Viewer`` / ``Editor`` / ``Admin``: the signed-in session, with at least that scope. No
  session: ``SignInRequired`` (a redirect to the sign-in page, back here afterwards). A session
  without the scope: ``UiForbidden`` (a 403 page).
- ``EditorForm`` / ``AdminForm``: for unsafe methods (POST): the scope as above, then the CSRF
  check, then the form's fields. ``AdminUpload``: the same for a form with one file (a bundle
  upload), bounded by ``REGISTRY_LIMIT_BUNDLE_BYTES`` instead. The CSRF token is per session, sent in the hidden field
  ``csrf_token`` of every form (or the ``X-CSRF-Token`` header htmx adds); a request without it,
  or with another session's, is refused with 403 before anything is written. With the session
  cookie being ``SameSite=Lax``, a cross-site POST does not even carry the session.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Coroutine
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Depends, Request
from starlette.datastructures import FormData
from starlette.responses import Response

from registry.api.deps import get_registry
from registry.catalog.web_sessions import SignedIn
from registry.limits import LimitExceeded, Limits

SESSION_COOKIE = "mcpr_ui_session"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
#: Most fields one form may have (the largest form, a prompt editor, has a few hundred).
FORM_FIELDS = 1000
#: An upload form's body may pass ``bundle_bytes`` by this much: its other fields and the
#: multipart framing (the file itself is held to ``bundle_bytes``).
UPLOAD_FORM_BYTES = 64 * 1024
#: Fields besides the file an upload form may have.
UPLOAD_FIELDS = 8


class SignInRequired(Exception):
    """No live session: send the browser to the sign-in page, then back to ``next_path``.
    ``unsaved``: what was refused was an entry editor's save, whose edits the browser keeps as a
    draft (the sign-in page says so)."""

    def __init__(self, next_path: str, reason: str | None = None, *, unsaved: bool = False) -> None:
        super().__init__(next_path)
        self.next_path = next_path
        self.reason = reason
        self.unsaved = unsaved


class UiForbidden(Exception):
    """Signed in, but not allowed (scope or CSRF): a 403 page saying why (and ``link``, a
    ``{"href", "text"}`` to go on from, when there is one better than the home page)."""

    def __init__(self, message: str, link: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.link = link


def is_https(request: Request) -> bool:
    return request.url.scheme == "https"


def set_session_cookie(response: Response, request: Request, secret: str, max_age: int) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        secret,
        max_age=max_age,
        path="/ui",
        httponly=True,
        samesite="lax",
        secure=is_https(request),
    )


def clear_session_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(SESSION_COOKIE, path="/ui", httponly=True, samesite="lax", secure=is_https(request))


def _here(request: Request, *, editor: bool = False) -> str:
    """Where to come back to after signing in: this page. A form post cannot be replayed: an
    htmx request comes back to the page it was sent from (``HX-Current-URL``, its path
    only: the sign-in page's ``safe_next`` keeps it to this UI), an entry editor's post to
    the editor (its POST and GET paths are the same), any other post to the home page."""
    htmx = request.headers.get("hx-request") == "true"
    if htmx:
        current = urlsplit(request.headers.get("hx-current-url", ""))
        if current.path.startswith("/ui/"):
            return current.path + ("?" + current.query if current.query else "")
    if request.method != "GET":
        return request.url.path if editor and not htmx else "/ui/"
    return request.url.path + ("?" + request.url.query if request.url.query else "")


def signed_in(request: Request) -> SignedIn | None:
    """The live session of this request, if any (read once per request)."""
    if hasattr(request.state, "ui"):
        found: SignedIn | None = request.state.ui
        return found
    secret = request.cookies.get(SESSION_COOKIE, "")
    found = get_registry(request).web_sessions.find(secret) if secret else None
    request.state.ui = found
    return found


def require(scope: str, *, editor: bool = False) -> Callable[[Request], SignedIn]:
    """The dependency for ``scope``; ``editor``: it guards an entry editor's posts (a refusal
    for an ended session sends the browser back to the editor, saying the edits were kept)."""

    def dependency(request: Request) -> SignedIn:
        ui = signed_in(request)
        if ui is None:
            had_cookie = bool(request.cookies.get(SESSION_COOKIE))
            raise SignInRequired(
                _here(request, editor=editor),
                "Your session has ended; sign in again." if had_cookie else None,
                unsaved=editor and request.method == "POST" and request.headers.get("hx-request") != "true",
            )
        # An editor in some team passes "editor": the catalog service checks each entry's own team.
        if not ui.principal.has(scope) and not (scope == "editor" and ui.can_edit):
            raise UiForbidden(
                f"Your token ({ui.principal.name}) has the {', '.join(sorted(ui.principal.scopes))} scope; "
                f"this needs {scope}."
            )
        return ui

    return dependency


def _limits(request: Request) -> Limits:
    return get_registry(request).settings.limits


async def read_form(request: Request) -> FormData:
    """The request's form fields, its body bounded by ``REGISTRY_LIMIT_BODY_BYTES`` as it is read
    (a declared length over it never gets here; see ``registry.ui.security``)."""
    cached: FormData | None = getattr(request.state, "form", None)
    if cached is not None:
        return cached
    limit = _limits(request).body_bytes
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise LimitExceeded("body_bytes", f"the form is larger than {limit} bytes")
    request._body = bytes(body)  # what request.form() parses (Starlette reads it from here)
    # One file: a resource editor's upload (its blob); the whole body is bounded above.
    form = await request.form(max_files=1, max_fields=FORM_FIELDS, max_part_size=limit)
    request.state.form = form
    return form


async def read_upload(request: Request) -> FormData:
    """A form with (at most) one file, for the bundle upload: its body bounded by
    ``REGISTRY_LIMIT_BUNDLE_BYTES`` (plus ``UPLOAD_FORM_BYTES`` for the other fields) as it is read;
    a declared length over that never gets here (``registry.ui.security``)."""
    cached: FormData | None = getattr(request.state, "form", None)
    if cached is not None:
        return cached
    bundle_bytes = _limits(request).bundle_bytes
    limit = bundle_bytes + UPLOAD_FORM_BYTES
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise LimitExceeded("bundle_bytes", f"the upload is larger than {bundle_bytes} bytes")
    request._body = bytes(body)
    del body
    form = await request.form(max_files=1, max_fields=UPLOAD_FIELDS, max_part_size=UPLOAD_FORM_BYTES)
    request.state.form = form
    return form


def form_field(form: FormData, name: str) -> str:
    """A posted form's text field, stripped ("" when it is missing or a file)."""
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def check_csrf(ui: SignedIn, sent: str | None) -> None:
    if not sent or not hmac.compare_digest(sent.encode(), ui.csrf_token.encode()):
        raise UiForbidden(
            "This form is missing its security token, or the token belongs to another session "
            "(the page may be from before you signed in again). Reload the page and try again."
        )


def require_form(
    scope: str, *, editor: bool = False
) -> Callable[[Request, SignedIn], Coroutine[Any, Any, tuple[SignedIn, FormData]]]:
    # A default, not ``Annotated[...]``: with postponed annotations FastAPI could not see ``scope``.
    async def dependency(
        request: Request, ui: SignedIn = Depends(require(scope, editor=editor))
    ) -> tuple[SignedIn, FormData]:
        form = await read_form(request)
        field = form.get(CSRF_FIELD)
        try:
            check_csrf(ui, request.headers.get(CSRF_HEADER) or (field if isinstance(field, str) else None))
        except UiForbidden as exc:
            if editor and request.headers.get("hx-request") != "true":
                # Signed in again elsewhere while this editor was open: its form is the old session's.
                raise UiForbidden(
                    exc.message + " Your edits were not saved; they are kept in this browser, and the "
                    "editor offers them back.",
                    link={"href": request.url.path, "text": "Open the editor again"},
                ) from exc
            raise
        return ui, form

    return dependency


async def _admin_upload(request: Request, ui: SignedIn = Depends(require("admin"))) -> tuple[SignedIn, FormData]:
    form = await read_upload(request)
    field = form.get(CSRF_FIELD)
    check_csrf(ui, request.headers.get(CSRF_HEADER) or (field if isinstance(field, str) else None))
    return ui, form


Viewer = Annotated[SignedIn, Depends(require("viewer"))]
Editor = Annotated[SignedIn, Depends(require("editor"))]
Admin = Annotated[SignedIn, Depends(require("admin"))]
EditorForm = Annotated[tuple[SignedIn, FormData], Depends(require_form("editor"))]
#: An entry editor's posts (save, row buttons, live checks): as ``EditorForm``, but an ended
#: session sends the browser back to the editor, whose edits the browser kept as a draft.
EntryEditorForm = Annotated[tuple[SignedIn, FormData], Depends(require_form("editor", editor=True))]
AdminForm = Annotated[tuple[SignedIn, FormData], Depends(require_form("admin"))]
AdminUpload = Annotated[tuple[SignedIn, FormData], Depends(_admin_upload)]
