"""The change log read newest first, filtered: what the web UI's Activity and Home pages show.

``CatalogService.changes`` reads the log forwards (after an id), which is what notifications and
stream resumption need. People want the other direction: the newest changes, narrowed to one
kind, one entry or one author, a page at a time. Pages are keyset-paginated on the change id
(``before``), so page 500 costs what page 1 does; the filters use ``ix_changes_entry`` (kind,
name) when an entry is named, and otherwise walk the primary key backwards until a page is full.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from registry.catalog.access import Access
from registry.catalog.reads import change_as_dict, visible_changes
from registry.catalog.service import CatalogService
from registry.db.changelog import CATALOG_KINDS
from registry.db.models import Change

#: Most rows one page may ask for.
MAX_PAGE = 200


@dataclass(frozen=True)
class ChangeFilter:
    """What to narrow the log to; None (or empty) means any."""

    kind: str | None = None
    name: str | None = None
    actor: str | None = None


@dataclass(frozen=True)
class ChangePage:
    items: list[dict[str, Any]]
    #: Pass as ``before`` for the next (older) page; None when this page is the last.
    next_before: int | None


def recent_changes(
    catalog: CatalogService,
    where: ChangeFilter = ChangeFilter(),
    *,
    before: int | None = None,
    limit: int = 50,
    access: Access | None = None,
) -> ChangePage:
    """The newest changes matching ``where`` with ids below ``before`` (None: from the newest),
    among those whose audience includes ``access`` (``registry.catalog.reads.visible_changes``)."""
    limit = max(1, min(limit, MAX_PAGE))
    stmt = select(Change).where(Change.kind.in_(CATALOG_KINDS))  # governance events: /ui/audit
    stmt = stmt.where(*visible_changes(access))
    if where.kind:
        stmt = stmt.where(Change.kind == where.kind)
    if where.name:
        stmt = stmt.where(Change.name == where.name)
    if where.actor:
        stmt = stmt.where(Change.actor == where.actor)
    if before is not None:
        stmt = stmt.where(Change.id < before)
    stmt = stmt.order_by(Change.id.desc()).limit(limit + 1)
    with catalog.db.session() as session:
        rows = list(session.scalars(stmt))
    more = len(rows) > limit
    rows = rows[:limit]
    return ChangePage([change_as_dict(c) for c in rows], rows[-1].id if more and rows else None)
