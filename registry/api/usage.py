"""``/api/v1/usage`` and ``/api/v1/{prompts,resources,tools}/{name}/usage``: who uses what.

Uses are what agents did over MCP (``prompts/get``, ``resources/read``, ``tools/call``), counted
per entry version, agent and hour (``registry.catalog.usage``; written every
``REGISTRY_USAGE_FLUSH_S`` seconds, so the newest seconds may not show yet). Any admin-API token
may read them, for the entries it can see.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from registry.api.auth import ViewerPrincipal
from registry.api.deps import UsageDep
from registry.api.instants import instant_query, parse_instant
from registry.api.kinds import EntryName, KindDep, kind_router
from registry.api.models import INT32_MAX
from registry.api.problems import ALWAYS, documented
from registry.catalog.specs import KIND_BY_COLLECTION, NAME_PATTERN
from registry.catalog.usage_report import MAX_DAYS, MAX_ROWS, UsageFilter

Kind = Literal["prompt", "resource", "tool"]
Method = Literal["get", "read", "call"]
GroupName = Literal["entry", "version", "agent", "version_agent", "hour"]
#: The schema's bound on a choice's length (every string parameter has one).
_ENUM_CHARS: dict[str, Any] = {"maxLength": 16}
#: Longest agent key: ``user:`` and a subject, as stored.
AGENT_CHARS = 300

_HOUR = "2025-06-02T10:00:00Z"
_ROW_EXAMPLE: dict[str, Any] = {
    "kind": "prompt",
    "name": "release-notes",
    "version": 3,
    "agent": "token:7",
    "agent_name": "ci-bot",
    "method": "get",
    "hour": None,
    "uses": 42,
    "last_used": _HOUR,
}


def _examples(*examples: dict[str, Any]) -> ConfigDict:
    return ConfigDict(json_schema_extra={"examples": list(examples)})


class UsageRow(BaseModel):
    """Uses added up over one group: the fields the report is grouped by are set, the others null."""

    model_config = _examples(_ROW_EXAMPLE)

    kind: Kind | None = Field(description="the entry's kind (groups entry, version, version_agent)")
    name: str | None = Field(description="the entry's name (groups entry, version, version_agent)")
    version: int | None = Field(ge=1, le=INT32_MAX, description="the version served (groups version, version_agent)")
    agent: str | None = Field(description="`token:<id>`, `user:<subject>` or `anonymous` (groups agent, version_agent)")
    agent_name: str | None = Field(description="the token's name, the user's subject, or `anonymous`")
    method: Method | None = Field(description="get (prompts/get), read (resources/read) or call (tools/call)")
    hour: datetime | None = Field(description="the hour (UTC) the uses were made in (group hour)")
    uses: int = Field(ge=0, description="prompts got, resources read, tool calls made")
    last_used: datetime = Field(description="the start of the last hour with a use (hour precision)")


class UsageReport(BaseModel):
    """Uses in a window, grouped, most used first (group `hour`: newest first)."""

    model_config = _examples(
        {
            "group": "version_agent",
            "since": "2025-05-26T10:00:00Z",
            "until": "2025-06-02T10:31:07Z",
            "items": [_ROW_EXAMPLE],
            "more": False,
        }
    )

    group: GroupName
    since: datetime = Field(description="hour buckets from this one (the start of `since`'s hour) ...")
    until: datetime = Field(description="... to those starting before this")
    items: list[UsageRow]
    more: bool = Field(description="more groups than `limit` matched")


class AgentUse(BaseModel):
    """One agent's uses of one version in the recent window."""

    model_config = _examples({"agent": "token:7", "agent_name": "ci-bot", "uses": 42, "last_used": _HOUR})

    agent: str = Field(description="`token:<id>`, `user:<subject>` or `anonymous`")
    agent_name: str
    uses: int = Field(ge=0)
    last_used: datetime


_VERSION_EXAMPLE: dict[str, Any] = {
    "version": 3,
    "labels": ["production"],
    "uses": 1200,
    "last_used": _HOUR,
    "recent_uses": 42,
    "agents_total": 1,
    "agents": [{"agent": "token:7", "agent_name": "ci-bot", "uses": 42, "last_used": _HOUR}],
}


class VersionUsage(BaseModel):
    """One version: its uses ever, and who used it in the last `days` days."""

    model_config = _examples(_VERSION_EXAMPLE)

    version: int = Field(ge=1, le=INT32_MAX)
    labels: list[str] = Field(description="the labels on this version now")
    uses: int = Field(ge=0, description="every use ever counted")
    last_used: datetime | None = Field(description="the start of the last hour with a use; null: never used")
    recent_uses: int = Field(ge=0, description="uses in the last `days` days")
    agents_total: int = Field(ge=0, description="agents that used it in the last `days` days")
    agents: list[AgentUse] = Field(description="those agents, most uses first (at most 100)")


class EntryUsage(BaseModel):
    """An entry's usage per version, newest version first: the versions used or labelled now."""

    model_config = _examples(
        {
            "kind": "prompt",
            "name": "release-notes",
            "method": "get",
            "days": 30,
            "since": "2025-05-03T10:00:00Z",
            "versions": [_VERSION_EXAMPLE],
            "more_versions": False,
        }
    )

    kind: Kind
    name: str
    method: Method
    days: int = Field(ge=1, le=MAX_DAYS, description="the recent window, in days")
    since: datetime = Field(description="where the recent window starts")
    versions: list[VersionUsage]
    more_versions: bool = Field(description="more than 1,000 versions were used: the oldest are left out")


router = APIRouter(tags=["usage"])


@router.get(
    "/usage",
    summary="Uses of entries by agents over MCP, per version, agent, entry or hour",
    operation_id="listUsage",
    response_model=UsageReport,
    responses=documented(*ALWAYS, 422),
)
def list_usage(
    usage: UsageDep,
    principal: ViewerPrincipal,
    kind: Annotated[Kind | None, Query(description="only this kind of entry", json_schema_extra=_ENUM_CHARS)] = None,
    name: Annotated[
        str | None, Query(pattern=NAME_PATTERN, max_length=128, description="only the entry of this name")
    ] = None,
    version: Annotated[int | None, Query(ge=1, le=INT32_MAX, description="only this version")] = None,
    agent: Annotated[
        str | None,
        Query(
            min_length=1, max_length=AGENT_CHARS, description="only this agent (`token:7`, `user:alice`, `anonymous`)"
        ),
    ] = None,
    method: Annotated[Method | None, Query(description="only get, read or call", json_schema_extra=_ENUM_CHARS)] = None,
    since: Annotated[
        str | None, instant_query("from the hour of this instant (default: 7 days before `until`)")
    ] = None,
    until: Annotated[str | None, instant_query("to hours starting before this instant (default: now)")] = None,
    group: Annotated[
        GroupName,
        Query(
            description="add uses up per entry, version, agent, version and agent, or hour",
            json_schema_extra=_ENUM_CHARS,
        ),
    ] = "version",
    limit: Annotated[int, Query(ge=1, le=MAX_ROWS, description="most groups listed")] = 100,
) -> dict[str, Any]:
    filters = UsageFilter(
        kind=kind,
        name=name,
        version=version,
        agent=agent,
        method=method,
        since=parse_instant(since, "since"),
        until=parse_instant(until, "until"),
    )
    return usage.report(principal, filters, group=group, limit=limit)


def get_entry_usage(
    usage: UsageDep,
    kind: KindDep,
    principal: ViewerPrincipal,
    name: EntryName,
    days: Annotated[
        int, Query(ge=1, le=MAX_DAYS, description="list the agents that used each version in this many days")
    ] = 30,
) -> dict[str, Any]:
    return usage.entry(principal, kind, name, days=days)


for _collection, _kind in KIND_BY_COLLECTION.items():
    _per_kind = kind_router(_collection)
    _per_kind.add_api_route(
        f"/{_collection}/{{name}}/usage",
        get_entry_usage,
        methods=["GET"],
        summary=f"Who uses which version of a {_kind}: uses per version, last use, recent agents",
        operation_id=f"get{_kind.capitalize()}Usage",
        response_model=EntryUsage,
        responses=documented(*ALWAYS, 404, 422),
    )
    router.include_router(_per_kind)
