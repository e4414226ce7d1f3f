"""Browsing a large catalog: list orders, a name-prefix filter and folders made from names.

Names are MCP names (``[A-Za-z0-9_.-]``, no ``/``: they are also URL path segments), so the
folder separator is the dot: ``support.refund-reply`` is the entry ``refund-reply`` in the folder
``support.``, and ``support.billing.refund`` sits in ``support.`` > ``billing.``. Dashes and
underscores join words inside a name (``refund-reply``) and never make folders. A folder is only
a prefix: nothing is stored for it, and its count is a ``GROUP BY`` over the names it holds.

Orders (``SORTS``): name A-Z (the ``(kind, archived, name)`` index), name Z-A (the same index
read backwards), newest update first, and most used first: uses in the last ``USAGE_DAYS`` days
summed from ``usage_counts`` hour buckets (their primary key starts with the hour, so the window
is one index range), ties and unused entries in name order.

Every function returns SQL pieces for ``CatalogService.list_entries`` and ``folders``; the
dialect matters only for the position of a character in a string (``instr`` on SQLite,
``strpos`` on PostgreSQL).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.orm import Session

from registry.db.models import Entry, UsageCount

#: Folder separator inside names.
SEPARATOR = "."
#: URL values of the orders, with what the list says for each.
SORTS: dict[str, str] = {
    "name": "Name, A to Z",
    "name-desc": "Name, Z to A",
    "updated": "Recently updated first",
    "usage": "Most used first (last 30 days)",
}
DEFAULT_SORT = "name"
#: The usage order's window, in days before now (hour buckets).
USAGE_DAYS = 30
#: A prefix is the start of a name: at most a name's length, of a name's characters.
PREFIX_PATTERN = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
#: Most folders one level shows (the rest are counted, and a search narrows them).
MAX_FOLDERS = 200


def check_sort(sort: str) -> str | None:
    """Why ``sort`` is not an order (None: it is one)."""
    if sort in SORTS:
        return None
    return f"{sort[:40]!r} is not a sort order: use one of {', '.join(SORTS)}"


def check_prefix(prefix: str) -> str | None:
    """Why ``prefix`` cannot start a name (None: it can)."""
    if PREFIX_PATTERN.fullmatch(prefix):
        return None
    return f"{prefix[:40]!r} is not the start of a name: 1-128 of A-Z a-z 0-9 _ . -"


def folder_path(prefix: str) -> list[tuple[str, str]]:
    """Breadcrumbs of a prefix: (segment shown, the prefix that opens it), outermost first.
    ``support.billing.`` -> [("support", "support."), ("billing", "support.billing.")]; a
    trailing part without a separator (a prefix typed by hand) is its own last crumb."""
    crumbs: list[tuple[str, str]] = []
    start = 0
    while start < len(prefix):
        end = prefix.find(SEPARATOR, start)
        stop = len(prefix) if end < 0 else end + 1
        crumbs.append((prefix[start : stop - (0 if end < 0 else 1)] or SEPARATOR, prefix[:stop]))
        start = stop
    return crumbs


def _position(session: Session, haystack: Any, needle: str) -> ColumnElement[int]:
    """1-based position of ``needle`` in ``haystack`` (0: absent)."""
    if session.get_bind().dialect.name == "sqlite":
        return func.instr(haystack, needle)
    return func.strpos(haystack, needle)


def _rest(prefix: str) -> ColumnElement[str]:
    """What follows ``prefix`` in the name."""
    return func.substr(Entry.name, len(prefix) + 1)


def prefix_filter(prefix: str) -> list[ColumnElement[bool]]:
    """Names starting with ``prefix``, exactly (case matters: SQLite's LIKE ignores it, so the
    ``substr`` comparison decides; the LIKE lets an index narrow where it can)."""
    return [
        Entry.name.startswith(prefix, autoescape=True),
        func.substr(Entry.name, 1, len(prefix)) == prefix,
    ]


def direct_filter(session: Session, prefix: str) -> ColumnElement[bool]:
    """Entries directly at the level ``prefix`` (nothing after it makes another folder)."""
    return _position(session, _rest(prefix), SEPARATOR) == 0


def folders(session: Session, filtered: Select[Any], prefix: str) -> tuple[list[tuple[str, int]], int]:
    """The folders one level below ``prefix`` among the entries ``filtered`` selects (an
    ``Entry`` select with every filter applied): ``(name ending in the separator, entries in
    it, subfolders included)`` in name order, at most ``MAX_FOLDERS``, and how many there are."""
    cut = _position(session, _rest(prefix), SEPARATOR)
    folder = func.substr(Entry.name, 1, len(prefix) + cut).label("folder")
    names = filtered.with_only_columns(folder).where(cut > 0).subquery()
    counted = select(names.c.folder, func.count().label("n")).group_by(names.c.folder)
    rows = session.execute(counted.order_by(names.c.folder).limit(MAX_FOLDERS + 1)).all()
    listed = [(str(row.folder), int(row.n)) for row in rows[:MAX_FOLDERS]]
    if len(rows) <= MAX_FOLDERS:
        return listed, len(listed)
    every = session.scalar(select(func.count()).select_from(counted.subquery()))
    return listed, int(every or 0)


def usage_since(now: datetime | None = None) -> datetime:
    """The first hour bucket the usage order counts."""
    start = (now or datetime.now(UTC)) - timedelta(days=USAGE_DAYS)
    return start.replace(minute=0, second=0, microsecond=0)


def ordered(stmt: Select[Any], kind: str, sort: str, *, now: datetime | None = None) -> Select[Any]:
    """``stmt`` (selecting ``Entry``) in ``sort`` order; the usage order adds a ``uses`` column."""
    if sort == "name-desc":
        return stmt.order_by(Entry.name.desc())
    if sort == "updated":
        return stmt.order_by(Entry.updated_at.desc(), Entry.name)
    if sort == "usage":
        counts = (
            select(UsageCount.name, func.sum(UsageCount.count).label("uses"))
            .where(UsageCount.hour >= usage_since(now), UsageCount.kind == kind)
            .group_by(UsageCount.name)
            .subquery()
        )
        uses = func.coalesce(counts.c.uses, 0).label("uses")
        return stmt.add_columns(uses).outerjoin(counts, counts.c.name == Entry.name).order_by(uses.desc(), Entry.name)
    return stmt.order_by(Entry.name)
