"""Bearer-token authentication for the admin API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from registry.api.deps import TokensDep
from registry.oidc import METADATA_PATH, public_base
from registry.runtime import registry_of
from registry.tokens import Principal, TokenRejected, TokenService

#: The scheme ``/openapi.json`` publishes (the Authorize button on ``/docs``). It only documents:
#: the token is checked by the request guard (registry/api/guard.py) and ``require`` below.
bearer_scheme = HTTPBearer(
    scheme_name="bearerAuth",
    bearerFormat="mcpr_...",
    description="An API token (`mcp-registry token create`, `POST /api/v1/tokens`, or `REGISTRY_ADMIN_TOKEN`), "
    "or, with single sign-on (`REGISTRY_OIDC_ISSUER`), an access token (JWT) from that issuer. "
    "Scopes: admin (everything, tokens included) > reviewer > editor (write entries) > viewer (read).",
    auto_error=False,
)


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def _challenge(request: Request, error: str = "") -> dict[str, str]:
    """``WWW-Authenticate``; with single sign-on it points at the protected-resource metadata
    (RFC 9728), where a client finds the issuer to get a token from."""
    settings = registry_of(request.scope["app"]).settings if "app" in request.scope else None
    params = [error] if error else []
    if settings is not None and settings.oidc_bearer_enabled:
        base = public_base(settings, request.url.scheme, request.headers.get("host"))
        params.append(f'resource_metadata="{base}{METADATA_PATH}"')
    return {"WWW-Authenticate": "Bearer" + (" " + ", ".join(params) if params else "")}


def authenticate(tokens: TokenService, request: Request) -> Principal:
    token = bearer_token(request)
    if token is None:
        raise HTTPException(401, "missing bearer token (Authorization: Bearer <token>)", _challenge(request))
    try:
        return tokens.verify(token)
    except TokenRejected as exc:  # unknown, revoked, "token expired", a JWT's precise reason
        raise HTTPException(401, exc.reason, _challenge(request, 'error="invalid_token"')) from None


def require(scope: str) -> Callable[..., Principal]:
    """A dependency that admits tokens carrying ``scope`` (or a scope that includes it)."""

    def dependency(
        request: Request,
        tokens: TokensDep,
        _documented: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
    ) -> Principal:
        # Under /api/ the request guard (registry/api/guard.py) has already looked the token up.
        principal = getattr(request.state, "principal", None)
        if principal is None:
            principal = authenticate(tokens, request)
        if not principal.has(scope):
            raise HTTPException(
                403, f"this token lacks the {scope!r} scope (it has: {', '.join(sorted(principal.scopes))})"
            )
        return principal

    return dependency


#: Route parameters that authenticate the caller and demand a scope.
ViewerPrincipal = Annotated[Principal, Depends(require("viewer"))]
AdminPrincipal = Annotated[Principal, Depends(require("admin"))]
