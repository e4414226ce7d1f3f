"""Jinja2 for the web UI's pages (``admin_ui/templates/``): one environment, autoescaped.

Pages are rendered on the server, whole, so reading works with JavaScript off; htmx (when it is
on) asks for the same URL with ``HX-Request`` and gets just the part that changes (the template
named ``partial``). Templates get the signed-in session, its CSRF token and a one-time notice
("flash") besides their own values; undefined names are errors, so a typo fails the tests
instead of showing an empty space.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import quote, unquote, urlencode

from fastapi import Depends
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from registry import __version__
from registry.catalog.service import to_yaml
from registry.catalog.web_sessions import SignedIn
from registry.paths import admin_ui_dir
from registry.runtime import registry_of
from registry.ui.security import STYLE_NONCE_KEY

log = logging.getLogger(__name__)

#: A one-time notice for the next page (set before a redirect, shown once, then cleared).
FLASH_COOKIE = "mcpr_ui_flash"
COLLECTIONS = (("prompts", "Prompts"), ("resources", "Resources"), ("tools", "Tools"))
#: A one-time marker for the page a successful editor save redirects to: the entry saved, whose
#: draft the browser drops (``admin_ui/static/drafts.js``). A cookie, like the notice, so that a
#: reload or a later visit of that page does not drop a newer draft.
SAVED_COOKIE = "mcpr_ui_saved"


def as_yaml(value: Any) -> str:
    """A JSON-like value as readable YAML (schemas, annotations, headers)."""
    if value is None:
        return ""
    return to_yaml(value).removesuffix("...\n")  # the bundles' and diffs' YAML, minus a bare scalar's end marker


def when(value: str | datetime | None) -> str:
    """A timestamp as people read it: ``2026-12-03 14:05 UTC``."""
    if value is None or value == "":
        return "—"
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


_WHERE_ROW = re.compile(r"(messages|arguments)\.(\d+)(?:\.(.*))?")


def friendly_where(where: str) -> str:
    """``messages.0.content.text`` as people say it: ``Message 1``; ``arguments.1.name``:
    ``Argument 2, name``."""
    found = _WHERE_ROW.fullmatch(where)
    if found is None:
        return where
    what = "Message" if found.group(1) == "messages" else "Argument"
    rest = found.group(3) or ""
    rest = "" if rest in ("content.text", "content") else rest.replace("content.", "").replace(".", " ")
    return f"{what} {int(found.group(2)) + 1}" + (f", {rest}" if rest else "")


def query(base: Mapping[str, Any], **changes: Any) -> str:
    """``?a=1&b=2`` from ``base`` with ``changes`` applied (None or "" drops a parameter)."""
    merged = {**base, **changes}
    pairs = [(k, str(v)) for k, v in merged.items() if v is not None and v != "" and v is not False]
    return "?" + urlencode(pairs) if pairs else ""


class ReviewsWaiting:
    """``reviews_waiting()`` in a template: how many change requests wait for the signed-in
    person's review (the navigation's badge, the home page's panel), None for someone who reviews
    nothing. Counted once per page, when a template first asks (one indexed COUNT: see
    ``ChangeRequestService.waiting_count``); a page rendered while the database is away (its error
    page) shows no count rather than failing."""

    def __init__(self, request: Request, ui: SignedIn | None) -> None:
        self.request = request
        self.ui = ui
        self.counted = False
        self.value: int | None = None

    def __call__(self) -> int | None:
        if not self.counted:
            self.counted = True
            if self.ui is not None:
                try:
                    reviews = registry_of(self.request.app).reviews
                    self.value = reviews.waiting_count(self.ui.principal, self.ui.principal.actor())
                except Exception:  # a count is no reason to fail a page (an error page least of all)
                    log.warning("could not count the change requests waiting for review", exc_info=True)
        return self.value


class Pages:
    """Renders the templates into responses."""

    def __init__(self) -> None:
        self.env = Environment(
            loader=FileSystemLoader(str(admin_ui_dir() / "templates")),
            autoescape=select_autoescape(["html"]),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            auto_reload=False,
        )
        self.env.filters.update(
            when=when,
            yaml=as_yaml,
            friendly_where=friendly_where,
            url=lambda v: quote(str(v), safe=""),
            tojson_compact=json.dumps,
        )
        self.env.globals.update(product_version=__version__, collections=COLLECTIONS, query=query)

    def render(
        self,
        request: Request,
        template: str,
        context: Mapping[str, Any] | None = None,
        *,
        status: int = 200,
        partial: str | None = None,
        signed_in: SignedIn | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HTMLResponse:
        """The page (or, for an htmx request when ``partial`` is given, just that part)."""
        ui = signed_in if signed_in is not None else getattr(request.state, "ui", None)
        # The one-shot notice belongs to the page a save redirects to. A check or list update that
        # htmx sends from the page being left (a typed field's "change" fires as Save is clicked)
        # can reach the server after the redirect set the cookie and before the page it names is
        # fetched: it neither shows the notice nor clears it, or that page would lose it.
        whole = request.headers.get("hx-request") != "true"
        flash = request.cookies.get(FLASH_COOKIE) if whole else None
        saved = request.cookies.get(SAVED_COOKIE) if whole else None
        values = {
            "request": request,
            "ui": ui,
            "csrf_token": ui.csrf_token if ui is not None else "",
            "flash": unquote(flash)[:500] if flash else None,
            "draft_saved": _saved_marker(saved) if saved else None,
            "nav": "",
            "reviews_waiting": ReviewsWaiting(request, ui),
            # Set when the page's handler allowed a style nonce (registry.ui.security).
            "style_nonce": getattr(request.state, STYLE_NONCE_KEY, None),
            **(context or {}),
        }
        name = partial if partial is not None and request.headers.get("hx-request") == "true" else template
        html = self.env.get_template(name).render(values)
        response = HTMLResponse(html, status_code=status, headers=dict(headers or {}))
        if flash:
            clear_flash(response)
        if saved:
            response.delete_cookie(SAVED_COOKIE, path="/ui", httponly=True, samesite="lax")
        return response


@functools.cache
def get_pages() -> Pages:
    """The process's one ``Pages``: its templates and filters are the package's own, the same for
    every web UI app, so routes take it as ``PagesDep`` and ``build_ui`` gives it to the error pages."""
    return Pages()


PagesDep = Annotated[Pages, Depends(get_pages)]


def set_flash(response: Response, message: str, *, secure: bool) -> None:
    response.set_cookie(
        FLASH_COOKIE, quote(message[:500]), max_age=60, path="/ui", httponly=True, samesite="lax", secure=secure
    )


def set_saved_marker(response: Response, kind: str, name: str, *, created: bool, secure: bool) -> None:
    """Tell the next page that ``kind`` ``name`` was saved from its editor (``created``: from the
    new-entry form), so the browser drops the draft it kept of it."""
    marker = json.dumps({"kind": kind, "name": name, "created": created}, separators=(",", ":"))
    response.set_cookie(
        SAVED_COOKIE, quote(marker), max_age=60, path="/ui", httponly=True, samesite="lax", secure=secure
    )


def _saved_marker(value: str) -> str | None:
    """The saved marker as the page carries it (compact JSON), or None if it is not one."""
    try:
        marker = json.loads(unquote(value[:1000]))
    except ValueError:
        return None
    if not isinstance(marker, dict) or not all(isinstance(marker.get(k), str) for k in ("kind", "name")):
        return None
    return json.dumps({"kind": marker["kind"], "name": marker["name"], "created": marker.get("created") is True})


def clear_flash(response: Response) -> None:
    response.delete_cookie(FLASH_COOKIE, path="/ui", httponly=True, samesite="lax")
