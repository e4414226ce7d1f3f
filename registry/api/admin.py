"""Tokens and the change log."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from registry.api.auth import AdminPrincipal, ViewerPrincipal
from registry.catalog.errors import Invalid
from registry.tokens import TokenService

router = APIRouter()


class TokenRequest(BaseModel):
    name: str = Field(min_length=1, max_length=128)
    scopes: list[str] = Field(min_length=1, description="admin | editor | viewer | agent")
    label: str | None = Field(default=None, description="agent tokens: the label this agent is served")
    expires_at: datetime | None = Field(
        default=None, description="when the token stops working (ISO 8601; without a zone, UTC)"
    )
    expires_in_days: float | None = Field(
        default=None, gt=0, le=36_500, description="or: how many days from now the token stops working"
    )

    def expiry(self) -> datetime | None:
        if self.expires_at is not None and self.expires_in_days is not None:
            raise Invalid("give expires_at or expires_in_days, not both")
        if self.expires_in_days is not None:
            return datetime.now(UTC) + timedelta(days=self.expires_in_days)
        return self.expires_at


def _tokens(request: Request) -> TokenService:
    tokens: TokenService = request.app.state.registry.tokens
    return tokens


@router.post("/tokens", status_code=201, tags=["tokens"], summary="Create a token (shown only in this response)")
def create_token(request: Request, body: TokenRequest, principal: AdminPrincipal) -> dict[str, Any]:
    token, info = _tokens(request).create(
        body.name, body.scopes, label=body.label, created_by=principal.name, expires_at=body.expiry()
    )
    return {"token": token, **info}


@router.get("/tokens", tags=["tokens"], summary="List tokens (never their values)")
def list_tokens(request: Request, _p: AdminPrincipal) -> dict[str, Any]:
    return {"items": _tokens(request).list_tokens()}


@router.delete("/tokens/{token_id}", tags=["tokens"], summary="Revoke a token")
def revoke_token(request: Request, token_id: int, _p: AdminPrincipal) -> dict[str, Any]:
    return _tokens(request).revoke(token_id)


@router.get("/changes", tags=["changes"], summary="The change log, oldest first, after a given id")
def list_changes(
    request: Request,
    _p: ViewerPrincipal,
    after: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    items = request.app.state.registry.catalog.changes(after=after, limit=limit)
    return {"items": items, "next_after": items[-1]["id"] if items else after}
