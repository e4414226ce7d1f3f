"""Tokens, the change log and the connected agents."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from registry.api.auth import AdminPrincipal, ViewerPrincipal
from registry.api.deps import CatalogDep, TokensDep, UsageDep
from registry.api.models import (
    INT64_MAX,
    AgentList,
    ChangePage,
    TokenCreated,
    TokenInfo,
    TokenList,
    TokenRequest,
    TokenTeams,
)
from registry.api.problems import ALWAYS, WITH_BODY, documented
from registry.catalog.agents import MAX_AGENTS
from registry.catalog.errors import Invalid

router = APIRouter()


def expiry(body: TokenRequest) -> datetime | None:
    if body.expires_at is not None and body.expires_in_days is not None:
        raise Invalid("give expires_at or expires_in_days, not both")
    if body.expires_in_days is not None:
        return datetime.now(UTC) + timedelta(days=body.expires_in_days)
    return body.expires_at


@router.post(
    "/tokens",
    status_code=201,
    tags=["tokens"],
    summary="Create a token (its value is shown only in this response)",
    operation_id="createToken",
    response_model=TokenCreated,
    responses=documented(*ALWAYS, *WITH_BODY),
)
def create_token(tokens: TokensDep, body: TokenRequest, principal: AdminPrincipal) -> dict[str, Any]:
    token, info = tokens.create(
        body.name,
        body.scopes,
        label=body.label,
        created_by=principal.name,
        expires_at=expiry(body),
        teams=body.teams,
        actor=principal.actor(),
    )
    return {"token": token, **info}


@router.get(
    "/tokens",
    tags=["tokens"],
    summary="List tokens (never their values)",
    operation_id="listTokens",
    response_model=TokenList,
    responses=documented(*ALWAYS),
)
def list_tokens(tokens: TokensDep, _p: AdminPrincipal) -> dict[str, Any]:
    return {"items": tokens.list_tokens()}


@router.delete(
    "/tokens/{token_id}",
    tags=["tokens"],
    summary="Revoke a token (refused at once on every replica; its MCP streams are closed)",
    operation_id="revokeToken",
    response_model=TokenInfo,
    responses=documented(*ALWAYS, 404, 422),
)
def revoke_token(
    tokens: TokensDep, token_id: Annotated[int, Path(ge=1, le=INT64_MAX)], principal: AdminPrincipal
) -> dict[str, Any]:
    return tokens.revoke(token_id, actor=principal.actor())


@router.put(
    "/tokens/{token_id}/teams",
    tags=["tokens"],
    summary="Replace a token's team memberships (audited; seen at once by its MCP and web UI sessions)",
    operation_id="setTokenTeams",
    response_model=TokenInfo,
    responses=documented(*ALWAYS, *WITH_BODY, 404, 409),
)
def set_token_teams(
    tokens: TokensDep,
    token_id: Annotated[int, Path(ge=1, le=INT64_MAX)],
    body: TokenTeams,
    principal: AdminPrincipal,
) -> dict[str, Any]:
    return tokens.set_teams(token_id, body.teams, actor=principal.actor())


@router.get(
    "/changes",
    tags=["changes"],
    summary="The change log, oldest first, after a given id",
    operation_id="listChanges",
    response_model=ChangePage,
    responses=documented(*ALWAYS, 422),
)
def list_changes(
    catalog: CatalogDep,
    principal: ViewerPrincipal,
    after: Annotated[int, Query(ge=0, le=INT64_MAX, description="the last change id you have (0: from the start)")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    items = catalog.changes(after=after, limit=limit, access=principal)
    return {"items": items, "next_after": items[-1]["id"] if items else after}


@router.get(
    "/agents",
    tags=["agents"],
    summary="The MCP sessions open now on every replica (client, protocol, transport, label, token)",
    operation_id="listAgents",
    response_model=AgentList,
    responses=documented(*ALWAYS, 422),
)
def list_agents(
    usage: UsageDep,
    _p: ViewerPrincipal,
    limit: Annotated[int, Query(ge=1, le=MAX_AGENTS, description="most sessions listed")] = 100,
) -> dict[str, Any]:
    return usage.agents(limit).as_dict()
