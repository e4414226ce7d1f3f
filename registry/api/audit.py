"""``/api/v1/audit``: the keyed change log as an audit trail, a check of it, and its head.

Reading needs any admin-API scope and shows what the caller's teams may see (admins: all);
verifying and reading the head need ``admin``, since they concern every row of every team.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from registry.api.auth import AdminPrincipal, ViewerPrincipal
from registry.api.deps import AuditDep
from registry.api.instants import instant_query, parse_instant
from registry.api.models import INT64_MAX
from registry.api.problems import ALWAYS, documented
from registry.catalog.audit_log import DEFAULT_PAGE, MAX_PAGE, AuditFilter, Order
from registry.catalog.audit_verify import Anchor
from registry.catalog.errors import NotFound

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

    id: int = Field(
        ge=-INT64_MAX - 1,
        le=INT64_MAX,
        description="increasing, in commit order, from 1 (a row below 1 was not written by the registry: "
        "verifying reports it)",
    )
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
    hash: str = Field(
        description="HMAC-SHA256 (hex) under the audit key over this row's content and `prev_hash` "
        "(rows written before the chain was keyed: SHA-256)"
    )


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

    id: int = Field(
        ge=-INT64_MAX - 1,
        le=INT64_MAX,
        description="the change id; a deleted row is reported at the row after it",
    )
    reason: str


class AuditDifference(BaseModel):
    """A table that does not say what the chain recorded, or a gap an anchor shows."""

    table: str = Field(description="entry_versions, labels, entries, change_requests, change_request_reviews, ...")
    message: str
    change_id: int | None = Field(description="the change row it concerns, when there is one")


class AuditHead(BaseModel):
    """The chain's newest row: keep it elsewhere, and give it to `mcp-registry audit verify --anchor`."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"id": 1250, "mac": "9f2c" + "0" * 60, "created_at": "2026-12-05T10:00:00+00:00"}]
        }
    )

    id: int = Field(ge=-INT64_MAX - 1, le=INT64_MAX)
    mac: str = Field(description="the row's MAC (hex)")
    created_at: str


class AuditVerification(BaseModel):
    """Whether the keyed chain is intact from its first row to its last, and whether the tables
    it describes (versions, labels, entries, change requests, reviews, protected labels) agree."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "intact": True,
                    "checked": 1250,
                    "broken": None,
                    "differences": [],
                    "difference_count": 0,
                    "keyed_from": 1,
                    "head": None,
                },
                {
                    "intact": False,
                    "checked": 41,
                    "broken": _BROKEN_EXAMPLE,
                    "differences": [],
                    "difference_count": 0,
                    "keyed_from": 1,
                    "head": None,
                },
            ]
        }
    )

    intact: bool
    checked: int = Field(ge=0, description="rows verified (before the broken one, if any)")
    broken: BrokenLinkInfo | None
    differences: list[AuditDifference] = Field(description="at most 200; `difference_count` is exact")
    difference_count: int = Field(ge=0)
    keyed_from: int | None = Field(description="the first keyed row (earlier rows predate the key)")
    head: AuditHead | None


_NAME = "a name, as stored (exact match)"


@router.get(
    "/audit",
    summary="The audit trail: every change and governance event, newest (or oldest) first, filtered",
    operation_id="listAudit",
    response_model=AuditPage,
    responses=documented(*ALWAYS, 422),
)
def list_audit(
    audit: AuditDep,
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
    page = audit.page(where, access=principal, order=order, after=after, limit=limit)
    return {"items": page.items, "next_after": page.next_after, "order": page.order, "limit": page.limit}


@router.get(
    "/audit/verify",
    summary="Check the keyed chain (the first row edited, deleted or re-hashed) and that the tables agree with it",
    operation_id="verifyAudit",
    response_model=AuditVerification,
    responses=documented(*ALWAYS, 422),
)
def verify_audit_chain(
    audit: AuditDep,
    _p: AdminPrincipal,
    anchor: Annotated[
        str | None,
        Query(
            pattern=r"^[1-9][0-9]{0,17}:[0-9a-fA-F]{64}$",
            max_length=83,
            description="`ID:MAC` of a head kept earlier (GET /api/v1/audit/head): that row must still be there",
        ),
    ] = None,
) -> dict[str, Any]:
    kept = None
    if anchor is not None:
        row_id, _, mac = anchor.partition(":")
        kept = Anchor(int(row_id), mac.lower())
    return audit.verify(kept).as_dict()


@router.get(
    "/audit/head",
    summary="The chain's newest row and its MAC: an anchor to keep outside the database",
    operation_id="auditHead",
    response_model=AuditHead,
    responses=documented(*ALWAYS, 404),
)
def audit_head(audit: AuditDep, _p: AdminPrincipal) -> dict[str, Any]:
    head = audit.head()
    if head is None:
        raise NotFound("the change log is empty: there is no head yet")
    return head.as_dict()
