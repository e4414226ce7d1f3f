"""``/ui/sso/start`` and ``/ui/sso/callback``: the web UI's single sign-on (OpenID Connect
authorization code flow with PKCE, S256).

``start`` sends the browser to the issuer's ``authorization_endpoint`` with a fresh ``state``,
``nonce`` and PKCE challenge. What the callback needs to check the answer (the state, the nonce,
the PKCE verifier, the redirect URI and where to go afterwards) travels in a short-lived cookie
(``FLOW_COOKIE``, HttpOnly, ``/ui/sso`` only, ``FLOW_SECONDS``), signed with a key derived from
the registry's secret key: every replica can check it, and nobody can forge or alter it.

``callback`` checks that the ``state`` the issuer sends back is this browser's (a link that
someone else started, or a tampered one, is refused: login CSRF), exchanges the code at the
``token_endpoint`` (with the verifier, and the client secret when one is configured), verifies
the ID token (signature, issuer, audience = the client id, times, nonce) and opens a web UI
session for the user it names (``UiSessionStore.sign_in_identity``). Every failure is shown on
the sign-in page, saying what went wrong without echoing anything the issuer or the URL said
beyond an OAuth error code.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from registry.api.deps import RegistryDep, WebSessionsDep
from registry.oidc import OidcError, OidcVerifier, check_url, fetch_json
from registry.runtime import Registry
from registry.tokens import Principal, TokenRejected
from registry.ui.auth import is_https, set_session_cookie
from registry.ui.signin import safe_next, signin_page, sso_enabled
from registry.ui.views import View, ViewDep

FLOW_COOKIE = "mcpr_ui_sso"
FLOW_PATH = "/ui/sso"
#: How long a started sign-in may take at the issuer before its answer is refused.
FLOW_SECONDS = 600
#: Purpose of the key (derived from REGISTRY_SECRET_KEY) that signs the flow cookie.
KEY_PURPOSE = "ui-sso-flow"
CALLBACK_PATH = "/ui/sso/callback"

NOT_CONFIGURED = "Single sign-on is not configured on this server: sign in with an API token."
UNREACHABLE = "The identity provider could not be reached. Try again in a moment, or sign in with an API token."
FLOW_LOST = "This single sign-on was started too long ago, in another browser, or with cookies off. Start it again."
STATE_MISMATCH = (
    "The sign-in answer does not belong to the sign-in this browser started (its state does not match). Start again."
)
_OAUTH_ERROR = re.compile(r"[a-z_]{1,64}")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _key(registry: Registry) -> bytes:
    return registry.secrets.derive_key(KEY_PURPOSE)


def seal(key: bytes, flow: dict[str, Any]) -> str:
    """The flow as a cookie value: its JSON, then an HMAC-SHA256 of it."""
    body = _b64(json.dumps(flow, separators=(",", ":")).encode())
    return body + "." + _b64(hmac.new(key, body.encode(), hashlib.sha256).digest())


def unseal(key: bytes, value: str) -> dict[str, Any] | None:
    """The flow a cookie value holds; None if it is missing, altered, or past its end."""
    if not value or len(value) > 4096 or value.count(".") != 1:
        return None
    body, _, mac = value.partition(".")
    expected = _b64(hmac.new(key, body.encode(), hashlib.sha256).digest())
    if not hmac.compare_digest(mac.encode(), expected.encode()):
        return None
    try:
        flow = json.loads(_unb64(body))
    except ValueError:
        return None
    if not isinstance(flow, dict) or not isinstance(flow.get("exp"), int) or flow["exp"] < time.time():
        return None
    fields = ("state", "nonce", "verifier", "next", "redirect_uri")
    return flow if all(isinstance(flow.get(name), str) for name in fields) else None


def exchange(
    oidc: OidcVerifier, client_id: str, client_secret: str | None, code: str, flow: dict[str, Any]
) -> Principal:
    """Trade the authorization code for tokens at the issuer and verify the ID token (blocking:
    run on a worker thread). Raises ``OidcError`` or ``TokenRejected``."""
    metadata = oidc.metadata()
    endpoint = check_url(metadata.get("token_endpoint"), "token_endpoint")
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": flow["redirect_uri"],
        "client_id": client_id,
        "code_verifier": flow["verifier"],
    }
    auth: tuple[str, str] | None = None
    if client_secret:
        methods = metadata.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        if isinstance(methods, list) and "client_secret_basic" in methods:
            auth = (quote(client_id, safe=""), quote(client_secret, safe=""))  # RFC 6749 section 2.3.1
        else:
            form["client_secret"] = client_secret
    answer = fetch_json(oidc.client, "POST", endpoint, data=form, auth=auth, headers={"Accept": "application/json"})
    id_token = answer.get("id_token") if isinstance(answer, dict) else None
    if not isinstance(id_token, str):
        raise OidcError("the issuer's token answer has no ID token (is the openid scope requested?)")
    return oidc.verify_id_token(id_token, flow["nonce"])


router = APIRouter()


def refused(pages: View, error: str, status: int, next_path: str = "/ui/") -> Response:
    response = signin_page(pages, next_path, error=error, status=status)
    response.delete_cookie(FLOW_COOKIE, path=FLOW_PATH, httponly=True, samesite="lax", secure=is_https(pages.request))
    return response


@router.get("/sso/start")
async def start(
    request: Request,
    pages: ViewDep,
    registry: RegistryDep,
    next: Annotated[str | None, Query(max_length=2000)] = None,
) -> Response:
    target = safe_next(next)
    if registry.oidc is None or not sso_enabled(request):
        return refused(pages, NOT_CONFIGURED, 404, target)
    try:
        metadata = await run_in_threadpool(registry.oidc.metadata)
        endpoint = check_url(metadata.get("authorization_endpoint"), "authorization_endpoint")
    except OidcError:
        return refused(pages, UNREACHABLE, 502, target)
    settings = registry.settings
    if not settings.public_url:  # never the Host header: the server refuses to start so (check_server_settings)
        return refused(pages, NOT_CONFIGURED, 404, target)
    verifier = secrets.token_urlsafe(48)
    flow = {
        "state": secrets.token_urlsafe(24),
        "nonce": secrets.token_urlsafe(24),
        "verifier": verifier,
        "next": target,
        "redirect_uri": settings.public_url.rstrip("/") + CALLBACK_PATH,
        "exp": int(time.time()) + FLOW_SECONDS,
    }
    params = {
        "response_type": "code",
        "client_id": settings.oidc_client_id,
        "redirect_uri": flow["redirect_uri"],
        "scope": settings.oidc_scopes,
        "state": flow["state"],
        "nonce": flow["nonce"],
        "code_challenge": _b64(hashlib.sha256(verifier.encode()).digest()),
        "code_challenge_method": "S256",
    }
    location = endpoint + ("&" if "?" in endpoint else "?") + urlencode(params)
    response = RedirectResponse(location, status_code=303)
    response.set_cookie(
        FLOW_COOKIE,
        seal(_key(registry), flow),
        max_age=FLOW_SECONDS,
        path=FLOW_PATH,
        httponly=True,
        samesite="lax",  # the issuer's redirect back is a top-level GET: the cookie comes along
        secure=is_https(request),
    )
    return response


@router.get("/sso/callback")
async def callback(
    request: Request,
    pages: ViewDep,
    registry: RegistryDep,
    sessions: WebSessionsDep,
    code: Annotated[str | None, Query(max_length=4096)] = None,
    state: Annotated[str | None, Query(max_length=512)] = None,
    error: Annotated[str | None, Query(max_length=256)] = None,
) -> Response:
    if registry.oidc is None or not sso_enabled(request):
        return refused(pages, NOT_CONFIGURED, 404)
    flow = unseal(_key(registry), request.cookies.get(FLOW_COOKIE, ""))
    if flow is None:
        return refused(pages, FLOW_LOST, 400)
    target = safe_next(flow["next"])
    if not state or not hmac.compare_digest(state.encode(), flow["state"].encode()):
        return refused(pages, STATE_MISMATCH, 400, target)
    if error is not None:
        shown = error if _OAUTH_ERROR.fullmatch(error) else "unknown error"
        return refused(pages, f"The identity provider did not sign you in ({shown}).", 401, target)
    if not code:
        return refused(pages, "The identity provider's answer has no authorization code. Start again.", 400, target)
    settings = registry.settings
    assert settings.oidc_client_id is not None  # sso_enabled
    try:
        principal = await run_in_threadpool(
            exchange, registry.oidc, settings.oidc_client_id, settings.oidc_client_secret, code, flow
        )
    except OidcError as exc:
        return refused(pages, f"The identity provider could not complete the sign-in: {exc}.", 502, target)
    except TokenRejected as exc:
        return refused(pages, f"The identity provider's ID token was refused: {exc.reason}.", 401, target)
    try:
        # The ID token's own expiry (often minutes) only bounds its use for this sign-in.
        secret, session = await run_in_threadpool(sessions.sign_in_identity, replace(principal, expires_at=None))
    except TokenRejected as exc:
        return refused(pages, exc.reason[:1].upper() + exc.reason[1:], 403, target)
    response = RedirectResponse(target, status_code=303)
    max_age = max(1, int((session.expires_at - datetime.now(UTC)).total_seconds()))
    set_session_cookie(response, request, secret, max_age)
    response.delete_cookie(FLOW_COOKIE, path=FLOW_PATH, httponly=True, samesite="lax", secure=is_https(request))
    return response
