"""Reads of the catalog as editors see it: one entry's version, lists and folders of entries,
an entry's versions and the diff of two, the change feed; each only what ``access`` may see."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Select, Text, cast, func, or_, select
from sqlalchemy.orm import Session, selectinload

from registry.catalog import browse
from registry.catalog.access import Access
from registry.catalog.diffs import version_diff
from registry.catalog.errors import Invalid, NotFound, Subject
from registry.catalog.repository import EntryRepository
from registry.catalog.sealing import mask
from registry.catalog.specs import KINDS
from registry.catalog.teams import GLOBAL_ONLY
from registry.catalog.values import EntryView, Page
from registry.db import search
from registry.db.engine import Database
from registry.db.models import Change, Entry


class EntryReads:
    """Reads entries of ``db``; lists in usage order are ranked by ``usage_ranking``."""

    def __init__(self, db: Database, usage_ranking: browse.UsageRanking) -> None:
        self.db = db
        #: Recent uses per entry, for lists in usage order (``registry.catalog.browse``).
        self.usage_ranking = usage_ranking
        self._usage_lists = browse.OrderedNames()

    def get(
        self,
        kind: str,
        name: str,
        *,
        version: int | None = None,
        label: str | None = None,
        access: Access | None = None,
    ) -> EntryView:
        with self.db.session() as session:
            repo = EntryRepository(session)
            entry = repo.require(kind, name, access=access)
            if label is not None:
                found = next((lb.version for lb in entry.labels if lb.name == label), None)
                if found is None:
                    raise NotFound(
                        f"{kind} {name!r} has no label {label!r}",
                        about=Subject(kind=kind, name=name, label=label, missing="label"),
                    )
                version = found
            return repo.view(entry, repo.version(entry, version or entry.latest_version))

    def list_entries(
        self,
        kind: str,
        *,
        tag: str | None = None,
        q: str | None = None,
        archived: bool = False,
        limit: int = 50,
        offset: int = 0,
        team: str | None = None,
        access: Access | None = None,
        sort: str = browse.DEFAULT_SORT,
        prefix: str | None = None,
        direct: bool = False,
    ) -> Page:
        """A page of entries in ``sort`` order (``registry.catalog.browse.SORTS``; name A-Z by
        default). ``q``: a substring of the name, title, description or a tag, any case (LIKE
        wildcards match themselves); ``tag``: entries carrying that tag. Both are served by an
        index (``registry.db.search``); with either, ``total`` counts up to
        ``EXACT_COUNT_UP_TO`` matches (``total_exact`` says whether it stopped there).
        ``prefix``: names starting with it; ``direct``: only those not inside a further folder
        (``browse.SEPARATOR``). The usage order gives each item its ``uses``.

        Only entries ``access`` sees are listed (global ones and its teams'); ``team`` narrows
        them to one team's, or with ``GLOBAL_ONLY`` (``-``) to global ones (a team ``access``
        does not see lists nothing, as an unknown one does)."""
        if kind not in KINDS:
            raise NotFound(f"unknown kind {kind!r}")
        problem = browse.check_sort(sort) or (browse.check_prefix(prefix) if prefix else None)
        if problem:
            raise Invalid(problem)
        limit = max(1, min(limit, 500))
        offset = max(0, offset)
        # Before the session: a first read of the sums opens one of its own, and on SQLite every
        # session is a write transaction (the two would wait for each other).
        read_at = self.usage_ranking.read_at(kind)  # before the sums: a list is never keyed newer than them
        uses = self.usage_ranking.sums(kind) if sort == "usage" else None
        with self.db.session() as session:
            stmt = self._filtered(session, kind, q=q, tag=tag, archived=archived, team=team, access=access)
            if prefix:
                stmt = stmt.where(*browse.prefix_filter(prefix))
            if direct:
                stmt = stmt.where(browse.direct_filter(session, prefix or ""))
            with_labels = stmt.options(selectinload(Entry.labels))
            if uses is not None:
                teams = access.visible_teams if access is not None else None
                key = (kind, q, tag, archived, team, None if teams is None else tuple(sorted(teams)), prefix, direct)
                marker = (read_at, session.scalar(select(func.max(Change.id))))
                names = self._usage_lists.get(key, marker)
                if names is None:
                    # Core, not the ORM: 10,000 names as plain tuples cost a third of the time.
                    names_query = browse.ordered(stmt.with_only_columns(Entry.__table__.c.name), "name")
                    names = browse.usage_order([row[0] for row in session.connection().execute(names_query)], uses)
                    self._usage_lists.put(key, marker, names)
                shown = names[offset : offset + limit]
                by_name = (
                    {e.name: e for e in session.scalars(with_labels.where(Entry.name.in_(shown)))} if shown else {}
                )
                rows = [by_name[n] for n in shown if n in by_name]
                total, total_exact = len(names), True
            else:
                rows = list(session.scalars(browse.ordered(with_labels, sort).limit(limit).offset(offset)))
                total, total_exact = _total(session, stmt, len(rows), limit, offset, searched=bool(q or tag))
            items = [
                {
                    "name": e.name,
                    "title": e.title,
                    "description": e.description,
                    "tags": [t for t in e.tags.split(",") if t],
                    **({"uri": e.uri} if e.kind == "resource" else {}),
                    "latest_version": e.latest_version,
                    "labels": {lb.name: lb.version for lb in e.labels},
                    "archived": e.archived,
                    "team": e.team,
                    "updated_at": e.updated_at.isoformat(),
                    **({"uses": uses.get(e.name, 0)} if uses is not None else {}),
                }
                for e in rows
            ]
        return Page(items=items, total=total, limit=limit, offset=offset, total_exact=total_exact)

    def folders(
        self,
        kind: str,
        *,
        prefix: str = "",
        tag: str | None = None,
        q: str | None = None,
        archived: bool = False,
        team: str | None = None,
        access: Access | None = None,
    ) -> tuple[list[tuple[str, int]], int]:
        """The folders one level below ``prefix`` (``registry.catalog.browse``) among the
        entries ``list_entries`` would list with the same filters, with how many entries each
        holds; and how many folders there are (at most ``browse.MAX_FOLDERS`` are listed)."""
        if kind not in KINDS:
            raise NotFound(f"unknown kind {kind!r}")
        problem = browse.check_prefix(prefix) if prefix else None
        if problem:
            raise Invalid(problem)
        with self.db.session() as session:
            stmt = self._filtered(session, kind, q=q, tag=tag, archived=archived, team=team, access=access)
            if prefix:
                stmt = stmt.where(*browse.prefix_filter(prefix))
            return browse.folders(session, stmt, prefix)

    def _filtered(
        self,
        session: Session,
        kind: str,
        *,
        q: str | None,
        tag: str | None,
        archived: bool,
        team: str | None,
        access: Access | None,
    ) -> Select[Any]:
        """The entries of ``kind`` a listing with these filters selects (unordered)."""
        stmt = select(Entry).where(Entry.kind == kind, Entry.archived == archived, *visible_entries(access))
        if team == GLOBAL_ONLY:
            stmt = stmt.where(Entry.team.is_(None))
        elif team is not None:
            stmt = stmt.where(Entry.team == team)
        return stmt.where(*search.filters(session, q=q, tag=tag))

    def versions(self, kind: str, name: str, *, access: Access | None = None) -> list[dict[str, Any]]:
        with self.db.session() as session:
            entry = EntryRepository(session).require(kind, name, access=access)
            by_version: dict[int, list[str]] = {}
            for label in entry.labels:
                by_version.setdefault(label.version, []).append(label.name)
            return [
                {
                    "version": v.number,
                    "author": v.author,
                    "change_note": v.change_note,
                    "created_at": v.created_at.isoformat(),
                    "labels": sorted(by_version.get(v.number, [])),
                }
                for v in reversed(entry.versions)
            ]

    def diff(
        self, kind: str, name: str, from_version: int, to_version: int, *, access: Access | None = None
    ) -> dict[str, Any]:
        with self.db.session() as session:
            repo = EntryRepository(session)
            entry = repo.require(kind, name, access=access)
            old = mask(kind, repo.version(entry, from_version).spec)
            new = mask(kind, repo.version(entry, to_version).spec)
        return version_diff(kind, name, from_version, to_version, old, new)

    def changes(self, after: int = 0, limit: int = 100, *, access: Access | None = None) -> list[dict[str, Any]]:
        """Catalog changes after ``after``, oldest first: those whose audience includes ``access``
        (the governance events of ``append_event`` are the audit trail's, not listed here)."""
        limit = max(1, min(limit, 1000))
        stmt = (
            select(Change)
            .where(Change.id > after, Change.kind.in_(KINDS), *visible_changes(access))
            .order_by(Change.id)
            .limit(limit)
        )
        with self.db.session() as session:
            return [change_as_dict(c) for c in session.scalars(stmt)]


def change_as_dict(change: Change) -> dict[str, Any]:
    return {
        "id": change.id,
        "created_at": change.created_at.isoformat(),
        "kind": change.kind,
        "name": change.name,
        "action": change.action,
        "version": change.version,
        "labels": change.labels,
        "uris": change.uris,
        "actor": change.actor,
        "note": change.note,
        "team": change.team,
        "audience": change.audience,
        "override": bool(change.override),
        "reason": change.reason,
    }


def _total(
    session: Session, stmt: Select[Any], found: int, limit: int, offset: int, *, searched: bool
) -> tuple[int, bool]:
    """How many entries ``stmt`` lists, and whether exactly, given ``found`` on the page at
    ``offset``. A search or tag filter counts up to ``EXACT_COUNT_UP_TO`` matches."""
    if found < limit and (found or offset == 0):
        return offset + found, True  # the last page: no need to count
    if searched:
        cap = search.EXACT_COUNT_UP_TO
        counted = session.scalar(
            select(func.count()).select_from(stmt.with_only_columns(Entry.id).limit(cap + 1).subquery())
        )
        return min(counted or 0, cap), (counted or 0) <= cap
    counted = session.scalar(select(func.count()).select_from(stmt.with_only_columns(Entry.id).subquery()))
    return counted or 0, True


def visible_entries(access: Access | None) -> list[ColumnElement[bool]]:
    """``WHERE`` terms keeping the entries ``access`` sees: global ones and its teams' (none for
    an admin or the system)."""
    teams = access.visible_teams if access is not None else None
    if teams is None:
        return []
    if not teams:
        return [Entry.team.is_(None)]
    return [or_(Entry.team.is_(None), Entry.team.in_(sorted(teams)))]


def visible_changes(access: Access | None) -> list[ColumnElement[bool]]:
    """``WHERE`` terms keeping the change rows whose audience includes ``access``: everyone's
    (``*``, or no audience: rows from before teams), or one of its teams (none for an admin or
    the system). The audience is a JSON list of names, matched as quoted text on both databases
    (team names hold no quote; LIKE wildcards in them are escaped)."""
    teams = access.visible_teams if access is not None else None
    if teams is None:
        return []
    text = cast(Change.audience, Text)
    allowed = [Change.audience.is_(None), text == "null", text.contains('"*"')]
    allowed += [text.contains(f'"{team}"', autoescape=True) for team in sorted(teams)]
    return [or_(*allowed)]
