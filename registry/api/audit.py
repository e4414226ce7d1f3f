"""``/api/v1/audit``: the hash-chained change log as an audit trail, and a check of the chain.

Reading needs any admin-API scope and shows what the caller's teams may see (admins: all);
verifying needs ``admin``, since it walks every row of every team.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from registry.api.auth import AdminPrincipal, ViewerPrincipal
from registry.api.instants import instant_query, parse_instant
from registry.api.models import INT64_MAX
from registry.api.problems import ALWAYS, documented
from registry.catalog.audit_log import DEFAULT_PAGE, MAX_PAGE, AuditFilter, Order, audit_page, verify_chain
from registry.db.engine import Database

router = APIRouter(tags=["audit"])

_ROW_EXAMPLE: dict[str, Any] = {
    "id": 42,
    "created_at": "2026-12-03T10:30:00+00:00",
    "kind": "prompt",
    "name": "release-notes",
    "action": "label_moved",
    "version": 3,
    "labels": ["production"],
    "actor": "ci-editor",
    "team": "payments",
    "token_id": 7,
    "user": None,
    "reason": None,
    "override": False,
    "note": "production: 2 -> 3",
    "prev_hash": "4f1c0d9a" + "0" * 56,
    "hash": "9b2e77c1" + "0" * 56,
}
_BROKEN_EXAMPLE: dict[str, Any] = {"id": 42, "reason": "its content does not match its hash (the row was edited)"}


class AuditRow(BaseModel):
    """One change-log row: a catalog change (kind prompt, resource or tool) or a governance event
    (kind change_request, team, label or token; these name no labels)."""

    model_config = ConfigDict(json_schema_extra={"examples": [_ROW_EXAMPLE]})

    id: int = Field(ge=1, le=INT64_MAX, description="increasing, in commit order")
    created_at: datetime
    kind: str = Field(description="prompt, resource, tool; or change_request, team, label, token", examples=["prompt"])
    name: str = Field(description="the entry, team, label, token or change request it concerns")
    action: str = Field(description="what happened: created, updated, label_moved, archived, approved, ...")
    version: int | None = Field(description="the entry version it concerns, if any")
    labels: list[str] = Field(description="the labels whose view changed (none for a governance event)")
    actor: str = Field(description="who, as lists show it (a token's name, a user's name, `seed`, `import`)")
    team: str | None = Field(description="the entry's team after the change; None: global")
    token_id: int | None = Field(description="the API token that made it, if one did")
    user: str | None = Field(description="the single-sign-on user that made it, if one did")
    reason: str | None = Field(description="why, as the actor gave it (required for an override)")
    override: bool = Field(description="an admin's emergency override of a protected label or failing checks")
    note: str | None
    prev_hash: str = Field(description="the previous row's `hash` (empty for the first row)")
    hash: str = Field(description="SHA-256 (hex) over this row's content and `prev_hash`")


class AuditPage(BaseModel):
    """A page of the audit trail; ask again with ``after=next_after`` (and the same filters and
    order) for the next."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"items": [_ROW_EXAMPLE], "next_after": None, "order": "newest", "limit": 100}]}
    )

    items: list[AuditRow]
    next_after: int | None = Field(description="pass as `after` for the next page; null: this page is the last")
    order: Order
    limit: int = Field(ge=1, le=MAX_PAGE)


class BrokenLinkInfo(BaseModel):
    """The first row whose hashes do not match its content or the row before it."""

    model_config = ConfigDict(json_schema_extra={"examples": [_BROKEN_EXAMPLE]})

    id: int = Field(ge=1, le=INT64_MAX, description="the change id; a deleted row is reported at the row after it")
    reason: str


class AuditVerification(BaseModel):
    """Whether the change log's hash chain is intact, from its first row to its last."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"intact": True, "checked": 1250, "broken": None},
                {"intact": False, "checked": 41, "broken": _BROKEN_EXAMPLE},
            ]
        }
    )

    intact: bool
    checked: int = Field(ge=0, description="rows verified (before the broken one, if any)")
    broken: BrokenLinkInfo | None


def _db(request: Request) -> Database:
    db: Database = request.app.state.registry.db
    return db


_NAME = "a name, as stored (exact match)"


#: An RFC 3339 date-time (JSON Schema's ``date-time``): a date, ``T``, a time, a zone.
@router.get(
    "/audit",
    summary="The audit trail: every change and governance event, newest (or oldest) first, filtered",
    operation_id="listAudit",
    response_model=AuditPage,
    responses=documented(*ALWAYS, 422),
)
def list_audit(
    request: Request,
    principal: ViewerPrincipal,
    actor: Annotated[str | None, Query(max_length=128, description="who (exact)")] = None,
    team: Annotated[str | None, Query(max_length=64, description="the team (exact)")] = None,
    kind: Annotated[
        str | None, Query(max_length=16, description="prompt, resource, tool, change_request, team, label or token")
    ] = None,
    name: Annotated[str | None, Query(max_length=128, description=_NAME)] = None,
    action: Annotated[str | None, Query(max_length=32, description="created, updated, label_moved, ...")] = None,
    token_id: Annotated[int | None, Query(ge=1, le=INT64_MAX, description="made with this API token")] = None,
    user: Annotated[str | None, Query(max_length=256, description="made by this single-sign-on user")] = None,
    override: Annotated[bool | None, Query(description="true: emergency overrides only; false: none")] = None,
    since: Annotated[str | None, instant_query("at or after this instant")] = None,
    until: Annotated[str | None, instant_query("before this instant", "2026-12-31T00:00:00Z")] = None,
    order: Annotated[
        Order, Query(description="newest first (default) or oldest first", json_schema_extra={"maxLength": 6})
    ] = "newest",
    after: Annotated[
        int | None, Query(ge=1, le=INT64_MAX, description="the `next_after` of the page before (in this order)")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"rows per page (at most {MAX_PAGE})")] = DEFAULT_PAGE,
) -> dict[str, Any]:
    where = AuditFilter(
        actor=actor,
        team=team,
        kind=kind,
        name=name,
        action=action,
        token_id=token_id,
        user=user,
        override=override,
        since=parse_instant(since, "since"),
        until=parse_instant(until, "until"),
    )
    page = audit_page(_db(request), where, access=principal, order=order, after=after, limit=limit)
    return {"items": page.items, "next_after": page.next_after, "order": page.order, "limit": page.limit}


@router.get(
    "/audit/verify",
    summary="Check the change log's hash chain: intact, or the first row edited, deleted or reordered",
    operation_id="verifyAudit",
    response_model=AuditVerification,
    responses=documented(*ALWAYS),
)
def verify_audit(request: Request, _p: AdminPrincipal) -> dict[str, Any]:
    checked, broken = verify_chain(_db(request))
    return {
        "intact": broken is None,
        "checked": checked,
        "broken": None if broken is None else {"id": broken.id, "reason": broken.reason},
    }
