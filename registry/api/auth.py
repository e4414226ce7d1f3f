"""Bearer-token authentication for the admin API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from registry.tokens import Principal, TokenRejected, TokenService


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def authenticate(tokens: TokenService, request: Request) -> Principal:
    token = bearer_token(request)
    if token is None:
        raise HTTPException(401, "missing bearer token (Authorization: Bearer <token>)", {"WWW-Authenticate": "Bearer"})
    try:
        return tokens.verify(token)
    except TokenRejected as exc:  # unknown, revoked, or "token expired"
        raise HTTPException(401, exc.reason, {"WWW-Authenticate": 'Bearer error="invalid_token"'}) from None


def require(scope: str) -> Callable[[Request], Principal]:
    """A dependency that admits tokens carrying ``scope`` (or a scope that includes it)."""

    def dependency(request: Request) -> Principal:
        # Under /api/ the request guard (registry/api/guard.py) has already looked the token up.
        principal = getattr(request.state, "principal", None)
        if principal is None:
            principal = authenticate(request.app.state.registry.tokens, request)
        if not principal.has(scope):
            raise HTTPException(
                403, f"this token lacks the {scope!r} scope (it has: {', '.join(sorted(principal.scopes))})"
            )
        return principal

    return dependency


#: Route parameters that authenticate the caller and demand a scope.
ViewerPrincipal = Annotated[Principal, Depends(require("viewer"))]
EditorPrincipal = Annotated[Principal, Depends(require("editor"))]
AdminPrincipal = Annotated[Principal, Depends(require("admin"))]
