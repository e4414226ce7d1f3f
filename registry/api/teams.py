"""``/api/v1/teams`` (teams: listed by members, managed by admins) and
``PUT /api/v1/{collection}/{name}/team`` (moving an entry between teams).

Thin like the entry routes: ``registry.catalog.teams.TeamService`` and
``CatalogService.set_team`` check who may do what, so the web UI behaves the same.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field

from registry.api import models
from registry.api.auth import AdminPrincipal, ViewerPrincipal
from registry.api.deps import CatalogDep, TeamsDep
from registry.api.entries import ENTRY_HEADERS, ENTRY_MODELS, WriterPrincipal
from registry.api.kinds import EntryName, KindDep, kind_router
from registry.api.openapi import KINDS
from registry.api.problems import ALWAYS, WITH_BODY, documented
from registry.catalog.specs import KIND_BY_COLLECTION
from registry.catalog.teams import TEAM_PATTERN, TEAM_TITLE_CHARS

#: Longest reason a move may give (as an override's reason).
REASON_CHARS = 2000

TeamPath = Annotated[
    str,
    Path(
        pattern=f"^{TEAM_PATTERN}$",
        min_length=1,
        max_length=64,
        description="a team's name",
        examples=["payments"],
    ),
]

_TEAM_EXAMPLE: dict[str, Any] = {
    "name": "payments",
    "title": "Payments squad",
    "created_by": "admin",
    "created_at": "2025-06-01T09:00:00+00:00",
    "entries": 12,
    "tokens": 3,
}


class TeamRequest(BaseModel):
    """A new team."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"name": "payments", "title": "Payments squad"}]}
    )

    name: models.TeamName
    title: str | None = Field(default=None, max_length=TEAM_TITLE_CHARS, description="what people call it")


class TeamUpdate(BaseModel):
    """A team's new title (its name is fixed: entries and tokens refer to it)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"title": "Payments and billing"}]})

    title: str | None = Field(max_length=TEAM_TITLE_CHARS, description="the new title; null removes it")


class TeamInfo(BaseModel):
    """A team, with how many entries it owns and how many active tokens belong to it."""

    model_config = ConfigDict(json_schema_extra={"examples": [_TEAM_EXAMPLE]})

    name: str
    title: str | None
    created_by: str | None
    created_at: datetime
    entries: int = Field(ge=0, description="entries it owns, archived ones included")
    tokens: int = Field(ge=0, description="unrevoked tokens that are members")


class TeamList(BaseModel):
    """Every team for an admin; for anyone else, the teams they belong to."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"items": [_TEAM_EXAMPLE]}]})

    items: list[TeamInfo]


class TeamMove(BaseModel):
    """Where an entry moves: a team, or null to make it global (everyone sees it)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"team": "payments", "reason": "payments owns this now"}, {"team": None}],
        },
    )

    team: models.TeamName | None = Field(
        description="the team that will own the entry (you need the editor role in it and in its current one); "
        "null: global"
    )
    reason: str | None = Field(default=None, max_length=REASON_CHARS, description="why (kept in the audit trail)")


router = APIRouter()


@router.get(
    "/teams",
    tags=["teams"],
    summary="List teams (all for an admin; your own otherwise)",
    operation_id="listTeams",
    response_model=TeamList,
    responses=documented(*ALWAYS),
)
def list_teams(teams: TeamsDep, principal: ViewerPrincipal) -> dict[str, Any]:
    return {"items": teams.list_teams(principal)}


@router.post(
    "/teams",
    status_code=201,
    tags=["teams"],
    summary="Create a team (admin)",
    operation_id="createTeam",
    response_model=TeamInfo,
    responses=documented(*ALWAYS, *WITH_BODY, 409),
)
def create_team(teams: TeamsDep, body: TeamRequest, principal: AdminPrincipal) -> dict[str, Any]:
    return teams.create(body.name, body.title, actor=principal.actor(), access=principal)


@router.get(
    "/teams/{team}",
    tags=["teams"],
    summary="Get a team (its members and admins)",
    operation_id="getTeam",
    response_model=TeamInfo,
    responses=documented(*ALWAYS, 404, 422),
)
def get_team(teams: TeamsDep, team: TeamPath, principal: ViewerPrincipal) -> dict[str, Any]:
    return teams.get(team, principal)


@router.patch(
    "/teams/{team}",
    tags=["teams"],
    summary="Change a team's title (admin)",
    operation_id="updateTeam",
    response_model=TeamInfo,
    responses=documented(*ALWAYS, *WITH_BODY, 404),
)
def update_team(teams: TeamsDep, team: TeamPath, body: TeamUpdate, principal: AdminPrincipal) -> dict[str, Any]:
    return teams.update(team, body.title, actor=principal.actor(), access=principal)


@router.delete(
    "/teams/{team}",
    tags=["teams"],
    summary="Delete a team that owns no entries (admin); tokens leave it",
    operation_id="deleteTeam",
    response_model=TeamInfo,
    responses=documented(*ALWAYS, 404, 409, 422),
)
def delete_team(teams: TeamsDep, team: TeamPath, principal: AdminPrincipal) -> dict[str, Any]:
    return teams.delete(team, actor=principal.actor(), access=principal)


def move_team(
    response: Response, catalog: CatalogDep, kind: KindDep, name: EntryName, body: TeamMove, principal: WriterPrincipal
) -> dict[str, Any]:
    result = catalog.set_team(kind, name, body.team, actor=principal.actor(body.reason or None), access=principal)
    response.headers["ETag"] = result.view.etag
    return result.view.as_dict()


for _collection, _kind in KIND_BY_COLLECTION.items():
    _per_kind = kind_router(_collection, tags=[_collection])
    _per_kind.add_api_route(
        f"/{_collection}/{{name}}/team",
        move_team,
        methods=["PUT"],
        summary=f"Move a {_kind} to another team (or make it global)",
        description="Who sees the entry changes at once, over the API, the UI and MCP. Needs the editor role in "
        "both the current and the new team (the editor scope for global entries); the move is audited.",
        operation_id=f"move{KINDS[_collection]}Team",
        response_model=ENTRY_MODELS[_kind],
        response_model_exclude_unset=True,
        responses={**documented(*ALWAYS, *WITH_BODY, 404), 200: {"headers": ENTRY_HEADERS}},
    )
    router.include_router(_per_kind)
