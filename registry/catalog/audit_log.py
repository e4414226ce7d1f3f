"""The audit trail: the change log read as who did what, filtered, paged, and checked for tampering.

Every row of the change log (catalog changes and governance events alike) is hash-chained
(``registry.db.audit``); this module is how people and tools read it back. Reading is keyset-paged
on the change id in either direction, so a deep page costs what the first does. What a caller may
see follows the catalog's visibility rule: a catalog change whose audience (the teams whose view
it altered; ``*`` everyone; None an old row, everyone) meets their teams, and a governance event
of a team they see (or of none), except the admin-only kinds (``ADMIN_ONLY_KINDS``): admins see
every row. The API and the web UI both read through ``audit_page``, so one rule holds for both.
``registry.catalog.audit_verify`` checks it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, Select, and_, case, exists, func, literal, literal_column, or_, select

from registry.catalog.access import Access
from registry.catalog.errors import Invalid
from registry.db.changelog import CATALOG_KINDS
from registry.db.engine import Database
from registry.db.models import Change

#: Rows per page unless asked otherwise, and the most one page may hold.
DEFAULT_PAGE = 100
MAX_PAGE = 500
#: The kinds of governance event (``append_event``), besides the catalog's own kinds.
EVENT_KINDS = ("change_request", "team", "label", "token", "bundle", "audit", "subscription", "tool_test")
#: Governance events only admins read: event subscriptions (``registry.events.service.AUDIT_KIND``)
#: are admin-only objects of no team, and their rows name receivers.
ADMIN_ONLY_KINDS = ("subscription",)
AUDIT_KINDS = (*CATALOG_KINDS, *EVENT_KINDS)

Order = Literal["newest", "oldest"]


@dataclass(frozen=True)
class AuditFilter:
    """What to narrow the trail to; None means any. ``since`` is inclusive, ``until`` exclusive."""

    actor: str | None = None
    team: str | None = None
    kind: str | None = None
    name: str | None = None
    action: str | None = None
    token_id: int | None = None
    user: str | None = None
    #: True: emergency overrides only; False: everything but them.
    override: bool | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class AuditPage:
    items: list[dict[str, Any]]
    #: Pass as ``after`` (with the same order) for the next page; None when this page is the last.
    next_after: int | None
    limit: int
    order: Order = "newest"
    filters: AuditFilter = field(default_factory=AuditFilter)


def audit_row(change: Any) -> dict[str, Any]:
    """One change row as the audit trail shows it (ORM object or result row)."""
    return {
        "id": change.id,
        "created_at": _utc(change.created_at).isoformat(),
        "kind": change.kind,
        "name": change.name,
        "action": change.action,
        "version": change.version,
        "labels": list(change.labels or []),
        "actor": change.actor,
        "team": change.team,
        "token_id": change.token_id,
        "user": change.user,
        "reason": change.reason,
        "override": bool(change.override),
        "note": change.note,
        "prev_hash": change.prev_hash or "",
        "hash": change.hash or "",
    }


def audit_page(
    db: Database,
    where: AuditFilter = AuditFilter(),
    *,
    access: Access | None = None,
    order: Order = "newest",
    after: int | None = None,
    limit: int = DEFAULT_PAGE,
) -> AuditPage:
    """A page of the trail in ``order``, continuing after row ``after`` (None: from the start of
    that order), of the rows ``access`` may see (None: the system, everything)."""
    if not 1 <= limit <= MAX_PAGE:
        raise Invalid(f"limit must be from 1 to {MAX_PAGE} rows per page (got {limit})")
    if order not in ("newest", "oldest"):
        raise Invalid(f"order must be newest or oldest (got {order!r})")
    stmt = _filtered(select(Change), where)
    visible = _visible(access, db.dialect)
    if visible is not None:
        stmt = stmt.where(visible)
    if order == "newest":
        if after is not None:
            stmt = stmt.where(Change.id < after)
        stmt = stmt.order_by(Change.id.desc())
    else:
        if after is not None:
            stmt = stmt.where(Change.id > after)
        stmt = stmt.order_by(Change.id)
    with db.session() as session:
        rows = list(session.scalars(stmt.limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    next_after = rows[-1].id if more and rows else None
    return AuditPage([audit_row(r) for r in rows], next_after, limit, order, where)


def _filtered(stmt: Select[Any], where: AuditFilter) -> Select[Any]:
    equal: Sequence[tuple[Any, Any]] = (
        (Change.actor, where.actor),
        (Change.team, where.team),
        (Change.kind, where.kind),
        (Change.name, where.name),
        (Change.action, where.action),
        (Change.token_id, where.token_id),
        (Change.user, where.user),
    )
    for column, value in equal:
        if value is not None and value != "":
            stmt = stmt.where(column == value)
    if where.override is not None:
        stmt = stmt.where(Change.override.is_(where.override))
    if where.since is not None:
        stmt = stmt.where(Change.created_at >= _utc(where.since))
    if where.until is not None:
        stmt = stmt.where(Change.created_at < _utc(where.until))
    return stmt


def _visible(access: Access | None, dialect: str) -> ColumnElement[bool] | None:
    """The rows ``access`` may see, as a condition (None: every row)."""
    teams = None if access is None else access.visible_teams
    if teams is None:
        return None
    names = sorted(teams)
    catalog_change = Change.kind.in_(CATALOG_KINDS)
    audience = or_(Change.audience.is_(None), _audience_meets(dialect, [*names, "*"]))
    event_team = or_(Change.team.is_(None), Change.team.in_(names)) if names else Change.team.is_(None)
    for_everyone = Change.kind.not_in(ADMIN_ONLY_KINDS)
    return or_(and_(catalog_change, audience), and_(~catalog_change, for_everyone, event_team))


def _audience_meets(dialect: str, names: list[str]) -> ColumnElement[bool]:
    """``changes.audience`` (a JSON list of team names) holds one of ``names``."""
    if dialect == "postgresql":
        # json_array_elements_text fails on a non-array (a JSON null): read those as [].
        as_array = case(
            (func.json_typeof(Change.audience) == literal("array"), Change.audience),
            else_=literal_column("'[]'::json"),
        )
        elements = func.json_array_elements_text(as_array).table_valued("value")
    else:
        elements = func.json_each(Change.audience).table_valued("value")
    return exists(select(literal(1)).select_from(elements).where(elements.c.value.in_(names)))


def _utc(value: datetime) -> datetime:
    """``value`` in UTC (naive: taken as UTC); an instant beyond what UTC can show is clamped."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00+01:00
        return (datetime.min if value.year < 2 else datetime.max).replace(tzinfo=UTC)
