"""What every ``/ui/`` response carries, and what every ``/ui/`` request may send.

``UiGuard`` is one ASGI middleware around the UI application:

- **Headers.** A strict Content-Security-Policy (scripts, styles, images, connections and form
  targets from this origin only; no inline script or style, no eval, no framing), ``nosniff``,
  ``Referrer-Policy: same-origin``; HTML pages are ``Cache-Control: no-store`` (a shown token
  value or a signed-in page must not be kept by the browser or a proxy). ``Server-Timing`` says
  how long the page took to start answering (``benchmarks/ui_pages.py`` reads it). The vendored
  htmx runs under that policy: the ``htmx-config`` meta tag in ``base.html`` turns off its eval,
  script tags in swapped content, inline indicator styles, its history cache (which would keep
  page content, a new token's value included, in localStorage) and the settling of ``style``
  attributes (a swap copies a replaced element's ``style`` onto its successor with
  ``setAttribute``, which ``style-src`` refuses).
- **Style nonce.** The editors' code editor (CodeMirror, vendored) writes its styles into
  ``<style>`` elements it creates (``style-mod``), which ``style-src 'self'`` refuses. A page that
  loads it calls ``allow_style_nonce(request)``: that response's policy adds
  ``'nonce-<random>'`` to ``style-src`` (a fresh one per response), the page hands the nonce to
  the script (``<meta property="csp-nonce" nonce=...>``), and only ``<style>`` elements carrying
  it apply. Every other page keeps the policy above unchanged; scripts never get a nonce.
- **Body size.** The admin API's request guard does not cover ``/ui/`` (it authenticates bearer
  tokens, and answers problem+json); form posts are bounded by the same
  ``REGISTRY_LIMIT_BODY_BYTES``: a declared length over it is refused here before anything is
  read; a body without a length is counted as it is read (``registry.ui.auth.read_form``). The
  refusal is an HTML page naming the limit. The bundle upload (``upload_paths``) is the one
  exception: its bound is ``REGISTRY_LIMIT_BUNDLE_BYTES`` (``upload_bytes``; counted the same way
  by ``registry.ui.auth.read_upload``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from registry.limits import LimitExceeded

#: No inline script, no inline style attribute or element, nothing from other origins.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
)
#: Where a page's style nonce waits for ``UiGuard`` (in the request's ``state``).
STYLE_NONCE_KEY = "csp_style_nonce"
_ALWAYS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def allow_style_nonce(request: Request) -> str:
    """A nonce that this response's CSP lets ``<style nonce=...>`` elements use (see the module's
    docstring); the same one however often a page asks."""
    nonce = getattr(request.state, STYLE_NONCE_KEY, None)
    if not isinstance(nonce, str):
        nonce = secrets.token_urlsafe(18)
        setattr(request.state, STYLE_NONCE_KEY, nonce)
    return nonce


def content_security_policy(style_nonce: str | None = None) -> str:
    """The policy, with ``style_nonce`` allowed for ``<style>`` elements when given."""
    if style_nonce is None:
        return CONTENT_SECURITY_POLICY
    return CONTENT_SECURITY_POLICY.replace("style-src 'self'", f"style-src 'self' 'nonce-{style_nonce}'", 1)


class UiGuard:
    """ASGI middleware: security headers on every answer, a bound on every request body.

    ``refusal(error)`` builds the ASGI app that answers a body over the limit (an HTML page).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        body_bytes: int,
        refusal: Callable[[LimitExceeded], ASGIApp],
        upload_paths: frozenset[str] = frozenset(),
        upload_bytes: int = 0,
        upload_form_bytes: int = 0,
    ) -> None:
        self.app = app
        self.body_bytes = body_bytes
        self.refusal = refusal
        #: Paths (within the UI app, e.g. ``/bundles``) whose POST is a file upload: the file may
        #: have ``upload_bytes``, the whole body ``upload_form_bytes`` more (other fields, framing).
        self.upload_paths = upload_paths
        self.upload_bytes = upload_bytes
        self.upload_form_bytes = upload_form_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started_at = time.perf_counter()
        # The request's state (Starlette's ``request.state``): a page may leave a style nonce there.
        state = scope.setdefault("state", {})

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                if b"content-security-policy" not in names:
                    nonce = state.get(STYLE_NONCE_KEY) if isinstance(state, dict) else None
                    policy = content_security_policy(nonce if isinstance(nonce, str) else None)
                    headers.append((b"content-security-policy", policy.encode()))
                headers.extend(h for h in _ALWAYS if h[0] not in names)
                content_type = next((v for n, v in headers if n.lower() == b"content-type"), b"")
                if content_type.startswith(b"text/html"):
                    headers.append((b"cache-control", b"no-store"))
                elapsed_ms = (time.perf_counter() - started_at) * 1000
                headers.append((b"server-timing", f"app;dur={elapsed_ms:.2f}".encode()))
                message = {**message, "headers": headers}
            await send(message)

        if scope["method"] in _BODY_METHODS:
            declared = dict(scope.get("headers", [])).get(b"content-length", b"")
            path: str = scope["path"]
            root: str = scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root) :]
            upload = scope["method"] == "POST" and path in self.upload_paths
            allowed = self.upload_bytes + self.upload_form_bytes if upload else self.body_bytes
            if declared.isdigit() and int(declared) > allowed:
                if upload:
                    refused = LimitExceeded("bundle_bytes", f"the upload is larger than {self.upload_bytes} bytes")
                else:
                    refused = LimitExceeded("body_bytes", f"the form is larger than {self.body_bytes} bytes")
                await self.refusal(refused)(scope, receive, send_with_headers)
                return
        await self.app(scope, receive, send_with_headers)
