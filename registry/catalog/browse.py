"""Browsing a large catalog: list orders, a name-prefix filter and folders made from names.

Names are MCP names (``[A-Za-z0-9_.-]``, no ``/``: they are also URL path segments), so the
folder separator is the dot: ``support.refund-reply`` is the entry ``refund-reply`` in the folder
``support.``, and ``support.billing.refund`` sits in ``support.`` > ``billing.``. Dashes and
underscores join words inside a name (``refund-reply``) and never make folders. A folder is only
a prefix: nothing is stored for it, and its count is a ``GROUP BY`` over the names it holds.

Orders (``SORTS``): name A-Z (the ``(kind, archived, name)`` index), name Z-A (the same index
read backwards), newest update first (the ``(kind, archived, updated_at DESC, name)`` index of
migration 0014), and most used first: uses in the last ``USAGE_DAYS`` days, ties and unused entries
in name order.

The usage order cannot be a join per request: summing ``usage_counts`` (one row per hour,
version, agent and method) for 10,000 entries read 32,000 rows in 60-170 ms on SQLite (11-20 ms
once migration 0014 put ``count`` into ``ix_usage_counts_entry``), and the rows grow with
traffic, not with the catalog. ``UsageRanking`` keeps each kind's sums in memory
instead, refreshed in a background thread once they are ``RANKING_TTL_S`` old (the page asking
is served the previous sums meanwhile; only the very first one waits). A usage-ordered page then
costs what the filtered names cost: their names in name order from the index, the used ones
moved to the front (``usage_order``), and one query for the 50 entries shown; ``OrderedNames``
keeps that order per set of filters until a change or new sums, so the next pages skip it. Uses are counted
in memory and written every ``REGISTRY_USAGE_FLUSH_S`` (10 s) anyway, so the list is as fresh
as the counts give or take ``RANKING_TTL_S``.

Every function returns SQL pieces for ``CatalogService.list_entries`` and ``folders``; the
dialect matters only for the position of a character in a string (``instr`` on SQLite,
``strpos`` on PostgreSQL).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.orm import Session

from registry.db.engine import Database
from registry.db.models import Entry, UsageCount

log = logging.getLogger("registry.catalog")

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
#: Age (seconds) past which the usage sums are read again (in the background).
RANKING_TTL_S = 10.0
#: Usage-ordered name lists kept (one per kind and set of filters, the most recently used).
ORDERED_LISTS = 16


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


def ordered(stmt: Select[Any], sort: str) -> Select[Any]:
    """``stmt`` (selecting ``Entry``) in ``sort`` order (not ``usage``: see ``usage_order``)."""
    if sort == "name-desc":
        return stmt.order_by(Entry.name.desc())
    if sort == "updated":
        return stmt.order_by(Entry.updated_at.desc(), Entry.name)
    return stmt.order_by(Entry.name)


def usage_order(names: Sequence[str], uses: dict[str, int]) -> list[str]:
    """``names`` (in name order) most used first; the unused keep their name order."""
    used = sorted((n for n in names if n in uses), key=lambda n: (-uses[n], n))
    return used + [n for n in names if n not in uses]


def usage_sums(db: Database, kind: str, *, now: datetime | None = None) -> dict[str, int]:
    """Uses of each ``kind`` entry in the last ``USAGE_DAYS`` days (entries never used: absent)."""
    query = (
        select(UsageCount.name, func.sum(UsageCount.count))
        .where(UsageCount.hour >= usage_since(now), UsageCount.kind == kind)
        .group_by(UsageCount.name)
    )
    with db.session() as session:
        return {str(name): int(total) for name, total in session.execute(query) if total}


class UsageRanking:
    """Each kind's usage sums, read at most every ``ttl_s`` seconds and in the background (see
    the module). Thread-safe: the web UI's pages run in a thread pool."""

    def __init__(
        self,
        db: Database,
        *,
        ttl_s: float = RANKING_TTL_S,
        read: Callable[[Database, str], dict[str, int]] = usage_sums,
    ) -> None:
        self.db = db
        self.ttl_s = ttl_s
        self._read = read
        self._lock = threading.Lock()
        #: kind -> (time.monotonic() when read, sums)
        self._sums: dict[str, tuple[float, dict[str, int]]] = {}
        self._reading: set[str] = set()

    def read_at(self, kind: str) -> float | None:
        """When the sums ``sums(kind)`` returns now were read (``time.monotonic()``)."""
        with self._lock:
            held = self._sums.get(kind)
        return held[0] if held is not None else None

    def sums(self, kind: str) -> dict[str, int]:
        """The newest sums read for ``kind`` (read now, waiting, only the first time)."""
        with self._lock:
            held = self._sums.get(kind)
            stale = held is None or time.monotonic() - held[0] >= self.ttl_s
            start = held is not None and stale and kind not in self._reading
            if start:
                self._reading.add(kind)
        if held is None:
            return self._refresh(kind)
        if start:
            threading.Thread(
                target=self._refresh_in_background, args=(kind,), name=f"usage-ranking-{kind}", daemon=True
            ).start()
        return held[1]

    def _refresh(self, kind: str) -> dict[str, int]:
        read_at = time.monotonic()
        sums = self._read(self.db, kind)
        with self._lock:
            self._sums[kind] = (read_at, sums)
        return sums

    def _refresh_in_background(self, kind: str) -> None:
        try:
            self._refresh(kind)
        except Exception:
            log.exception("could not read the usage sums for the %s list; the previous ones stay", kind)
        finally:
            with self._lock:
                self._reading.discard(kind)


class OrderedNames:
    """The names a usage-ordered list shows, in order, per kind and set of filters, kept while
    nothing they depend on changed: ``marker`` is (when the sums were read, the newest change id),
    so a save, a new entry, an archive or a team move (each a change row) and each new reading of
    the sums make a new list. Paging through one list then reads 50 rows, not every name again.
    At most ``ORDERED_LISTS`` lists, the least recently used dropped first. Thread-safe."""

    def __init__(self, most: int = ORDERED_LISTS) -> None:
        self.most = most
        self._lock = threading.Lock()
        self._lists: OrderedDict[Hashable, tuple[Hashable, list[str]]] = OrderedDict()

    def get(self, key: Hashable, marker: Hashable) -> list[str] | None:
        with self._lock:
            held = self._lists.get(key)
            if held is None or held[0] != marker:
                return None
            self._lists.move_to_end(key)
            return held[1]

    def put(self, key: Hashable, marker: Hashable, names: list[str]) -> None:
        with self._lock:
            self._lists[key] = (marker, names)
            self._lists.move_to_end(key)
            while len(self._lists) > self.most:
                self._lists.popitem(last=False)
