"""Many catalog writes in one transaction: what a bundle import and a catalog restore need.

Writing entry by entry (one transaction, one ORM flush and one change-log lock each) made a
20,000-prompt import take minutes and left half a bundle behind when a file failed. Here the
rows are prepared first, outside any transaction (validation, sealing secrets, denormalising),
and the transaction only writes them: ``executemany`` in chunks of ``CHUNK`` rows (SQLAlchemy
turns them into multi-row INSERTs), the change rows included, so the whole bundle commits or
nothing does.

The change log keeps its ordering rule (see ``registry.db.changelog``): on PostgreSQL the
advisory lock is taken once, right before the change rows are inserted (late, so a writer
holding an entry row we wait for is never waiting on us), and one ``NOTIFY`` carries the last
id; readers of the change log fetch the whole range after the id they saw.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar

import psycopg
import psycopg.sql
from sqlalchemy import (
    JSON,
    ColumnElement,
    Table,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    text,
    true,
    tuple_,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from registry.catalog.errors import Conflict
from registry.catalog.listing import listing_changed
from registry.catalog.protection import ProtectionPolicy, ReviewAsk
from registry.catalog.repository import EntryRepository
from registry.catalog.service import CatalogService
from registry.catalog.validation import PRODUCTION, check_labels
from registry.db.audit import Actor, as_actor, chain, digest, versions_digest
from registry.db.changelog import CHANGELOG_LOCK_KEY, NOTIFY_CHANNEL, audit_row, chain_key, last_change_id, last_hash
from registry.db.engine import Database
from registry.db.models import Change, Entry, EntryVersion, Label, utcnow

#: Rows per statement: large enough that round trips do not dominate, small enough for SQLite's
#: bound-parameter limit (32,766) with the widest row here (9 columns).
CHUNK = 1000
LATEST = "latest"
log = logging.getLogger("registry.catalog")

_ENTRIES: Table = Entry.__table__  # type: ignore[assignment]
_VERSIONS: Table = EntryVersion.__table__  # type: ignore[assignment]
_LABELS: Table = Label.__table__  # type: ignore[assignment]
_CHANGES: Table = Change.__table__  # type: ignore[assignment]

T = TypeVar("T")


def chunks(items: Sequence[T], size: int = CHUNK) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def resource_uris(kind: str, *specs: Mapping[str, Any] | None) -> list[str]:
    """The URIs (or URI templates) a resource change touches, for ``resources/updated``."""
    if kind != "resource":
        return []
    return sorted({s.get("uri") or s.get("uriTemplate") or "" for s in specs if s} - {""})


def denormalized(kind: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The copies of a version's descriptive fields that ``entries`` keeps for listing and search
    (what ``CatalogService._denormalize`` sets from a parsed spec; here from its stored form)."""
    tags = list(spec.get("tags") or [])
    return {
        "title": spec.get("title"),
        "description": spec.get("description"),
        "tags": "," + ",".join(tags) + ("," if tags else ""),
        "uri": (spec.get("uri") or spec.get("uriTemplate")) if kind == "resource" else None,
    }


@dataclass(frozen=True)
class HeadWrite:
    """One new version of an entry: a create (``entry_id`` None) or an update of ``base``."""

    kind: str
    name: str
    #: The stored (sealed) form of the new version.
    spec: dict[str, Any]
    entry_id: int | None = None
    #: The version this one follows (updates): the write is refused if the entry moved on since.
    base: int | None = None
    #: The stored spec of ``base`` (updates), for the change row's resource URIs.
    previous: dict[str, Any] | None = None


@dataclass(frozen=True)
class VersionRecord:
    number: int
    spec: dict[str, Any]
    author: str
    note: str | None
    created_at: datetime


@dataclass(frozen=True)
class HistoryWrite:
    """A whole entry as exported with its history: every version, its labels, its archived state."""

    kind: str
    name: str
    versions: list[VersionRecord]
    #: label -> version (without ``latest``, which always names the newest version).
    labels: dict[str, int]
    archived: bool
    created_at: datetime
    updated_at: datetime
    extra: dict[str, Any] = field(default_factory=dict)


def _append_changes(session: Session, rows: list[dict[str, Any]]) -> int | None:
    """Append change rows (in order) and return the last id; see the module docstring."""
    if not rows:
        return None
    is_postgres = session.get_bind().dialect.name == "postgresql"
    if is_postgres:
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": CHANGELOG_LOCK_KEY})
    rows = [audit_row(**row) for row in rows]
    chain(rows, last_hash(session), chain_key(session))  # under the lock: ours follow the newest row
    _insert(session, _CHANGES, rows)
    # Ours are the newest rows: appends are serialised (the advisory lock; SQLite's write lock).
    last = session.scalar(select(func.max(_CHANGES.c.id)))
    if is_postgres:
        session.execute(text("SELECT pg_notify(:channel, :payload)"), {"channel": NOTIFY_CHANNEL, "payload": str(last)})
    return last


def _is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def _insert_entries(session: Session, rows: list[dict[str, Any]]) -> list[int]:
    """Insert entry rows; their ids, in the order given. On PostgreSQL the ids are taken from the
    table's sequence first (one query), so the rows can be streamed with COPY; elsewhere a plain
    ``executemany`` and one select of the ids per chunk (``INSERT ... RETURNING`` over many rows
    fetches them one by one)."""
    if not rows:
        return []
    if _is_postgres(session):
        ids = list(
            session.scalars(
                text("SELECT nextval(pg_get_serial_sequence('entries', 'id')) FROM generate_series(1, :n)"),
                {"n": len(rows)},
            )
        )
        _insert(session, _ENTRIES, [{"id": i, **row} for i, row in zip(ids, rows, strict=True)])
        return ids
    ids = []
    for part in chunks(rows):
        session.execute(insert(_ENTRIES), part)
        by_kind: dict[str, list[str]] = {}
        for row in part:
            by_kind.setdefault(row["kind"], []).append(row["name"])
        found: dict[tuple[str, str], int] = {}
        for kind, names in by_kind.items():
            stmt = select(_ENTRIES.c.name, _ENTRIES.c.id).where(_ENTRIES.c.kind == kind, _ENTRIES.c.name.in_(names))
            found.update({(kind, name): entry_id for name, entry_id in session.execute(stmt)})
        ids.extend(found[(row["kind"], row["name"])] for row in part)
    return ids


def _insert(session: Session, table: Table, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` (dicts with the same keys): COPY on PostgreSQL (one stream, no per-row round
    trip or statement), ``executemany`` in chunks elsewhere."""
    if not rows:
        return
    if not _is_postgres(session):
        for part in chunks(rows):
            session.execute(insert(table), part)
        return
    columns = list(rows[0])
    as_json = [isinstance(table.c[name].type, JSON) for name in columns]
    driver = session.connection().connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    statement = psycopg.sql.SQL("COPY {} ({}) FROM STDIN").format(
        psycopg.sql.Identifier(table.name), psycopg.sql.SQL(", ").join(map(psycopg.sql.Identifier, columns))
    )
    with driver.cursor() as cursor, cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row(
                [
                    json.dumps(row[name]) if wrap and row[name] is not None else row[name]
                    for name, wrap in zip(columns, as_json, strict=True)
                ]
            )


def _check_bases(session: Session, writes: Sequence[HeadWrite]) -> None:
    """Lock the entries being updated and refuse if any moved on since the import was planned
    (an admin saved meanwhile): the plan's comparison would be stale."""
    expected = {w.entry_id: w for w in writes if w.entry_id is not None}
    ids = list(expected)
    for part in chunks(ids):
        stmt = select(_ENTRIES.c.id, _ENTRIES.c.latest_version, _ENTRIES.c.archived).where(_ENTRIES.c.id.in_(part))
        if session.get_bind().dialect.name == "postgresql":
            stmt = stmt.with_for_update()
        for entry_id, latest, archived in session.execute(stmt):
            write = expected.pop(entry_id)
            if latest != write.base or archived:
                raise Conflict(
                    f"{write.kind} {write.name!r} changed while the import was being prepared (now version "
                    f"{latest}{', archived' if archived else ''}); nothing was written: run the import again"
                )
    if expected:
        write = next(iter(expected.values()))
        raise Conflict(
            f"{write.kind} {write.name!r} was deleted while the import was being prepared; nothing was written"
        )


def _check_new_names(session: Session, writes: Sequence[HeadWrite | HistoryWrite]) -> None:
    """Refuse (before writing) if an entry to be created exists by now; the unique constraint
    would refuse it too, but this names it."""
    by_kind: dict[str, list[str]] = {}
    for write in writes:
        by_kind.setdefault(write.kind, []).append(write.name)
    for kind, names in by_kind.items():
        for part in chunks(names):
            found = session.scalar(
                select(_ENTRIES.c.name).where(_ENTRIES.c.kind == kind, _ENTRIES.c.name.in_(part)).limit(1)
            )
            if found is not None:
                raise Conflict(
                    f"{kind} {found!r} was created while the import was being prepared; nothing was written: "
                    "run the import again"
                )


def write_heads(
    session: Session,
    writes: Sequence[HeadWrite],
    *,
    actor: Actor | str,
    note: str | None,
    labels: Sequence[str],
    now: datetime,
    closing: Mapping[str, Any] | None = None,
) -> int | None:
    """Create or update entries, one new version each, moving ``latest`` and ``labels`` to it,
    then the ``closing`` governance event (``bundle_event``), if given. Returns the last change id
    (None when there was nothing to write)."""
    if not writes:
        return None
    creates = [w for w in writes if w.entry_id is None]
    updates = [w for w in writes if w.entry_id is not None]
    _check_new_names(session, creates)
    _check_bases(session, updates)
    moved = sorted({LATEST, *labels})

    new_ids = _insert_entries(
        session,
        [
            {
                "kind": w.kind,
                "name": w.name,
                "latest_version": 1,
                "archived": False,
                "created_at": now,
                "updated_at": now,
                **denormalized(w.kind, w.spec),
            }
            for w in creates
        ],
    )
    targets: list[tuple[int, int, HeadWrite]] = [(i, 1, w) for i, w in zip(new_ids, creates, strict=True)]
    # What each moved label served before, to record whether MCP lists change (read before moving).
    served_before = _served_before(session, updates, moved)
    # Updated entries keep their team; their change rows name it (whose agents hear of them).
    teams = _teams_of(session, [w.entry_id for w in updates if w.entry_id is not None])
    if updates:
        for part in chunks(updates):
            session.execute(
                update(_ENTRIES)
                .where(_ENTRIES.c.id == bindparam("b_id"))
                .values(
                    latest_version=bindparam("b_version"),
                    updated_at=bindparam("b_now"),
                    title=bindparam("b_title"),
                    description=bindparam("b_description"),
                    tags=bindparam("b_tags"),
                    uri=bindparam("b_uri"),
                ),
                [
                    {
                        "b_id": w.entry_id,
                        "b_version": (w.base or 0) + 1,
                        "b_now": now,
                        **{f"b_{k}": v for k, v in denormalized(w.kind, w.spec).items()},
                    }
                    for w in part
                ],
            )
            ids = [w.entry_id for w in part]
            session.execute(delete(_LABELS).where(_LABELS.c.entry_id.in_(ids), _LABELS.c.name.in_(moved)))
        targets += [(w.entry_id, (w.base or 0) + 1, w) for w in updates if w.entry_id is not None]

    _insert(
        session,
        _VERSIONS,
        [
            {
                "entry_id": i,
                "number": n,
                "spec": w.spec,
                "author": as_actor(actor).name,
                "change_note": note,
                "created_at": now,
            }
            for i, n, w in targets
        ],
    )
    _insert(
        session,
        _LABELS,
        [{"entry_id": i, "name": label, "version": n, "updated_at": now} for i, n, _w in targets for label in moved],
    )
    return _append_changes(
        session,
        [
            *(
                {
                    "created_at": now,
                    "kind": w.kind,
                    "name": w.name,
                    "action": "created" if w.entry_id is None else "updated",
                    "version": n,
                    "labels": moved,
                    "uris": resource_uris(w.kind, w.previous, w.spec),
                    "actor": actor,
                    "note": note,
                    # A new entry appears in every label it is given; an update changes the lists of the
                    # labels whose list item differs from what they served before.
                    "listing_changed": moved
                    if w.entry_id is None
                    else listing_changed(w.kind, moved, served_before.get(w.entry_id, {}), w.spec),
                    "team": teams.get(w.entry_id) if w.entry_id is not None else None,
                    "digest": versions_digest(w.kind, w.name, [(n, w.spec)]),
                }
                for _i, n, w in targets
            ),
            *([dict(closing)] if closing is not None else []),
        ],
    )


def _teams_of(session: Session, entry_ids: Sequence[int]) -> dict[int, str]:
    """The team of each of ``entry_ids`` that has one."""
    found: dict[int, str] = {}
    for part in chunks(list(entry_ids)):
        stmt = select(_ENTRIES.c.id, _ENTRIES.c.team).where(_ENTRIES.c.id.in_(part), _ENTRIES.c.team.is_not(None))
        found.update({row.id: row.team for row in session.execute(stmt)})
    return found


def _served_before(
    session: Session, updates: Sequence[HeadWrite], labels: Sequence[str]
) -> dict[int, dict[str, Mapping[str, Any] | None]]:
    """entry id -> label -> the stored spec that label serves now, for the entries being updated
    (two set-based queries per chunk; the base version's spec is known already)."""
    served: dict[int, dict[str, Mapping[str, Any] | None]] = {}
    by_id = {w.entry_id: w for w in updates if w.entry_id is not None}
    for part in chunks(list(by_id)):
        pointers = session.execute(
            select(_LABELS.c.entry_id, _LABELS.c.name, _LABELS.c.version).where(
                _LABELS.c.entry_id.in_(part), _LABELS.c.name.in_(labels)
            )
        ).all()
        other = {(e, v) for e, _n, v in pointers if v != by_id[e].base}
        specs: dict[tuple[int, int], Mapping[str, Any]] = {}
        if other:
            rows = session.execute(
                select(_VERSIONS.c.entry_id, _VERSIONS.c.number, _VERSIONS.c.spec).where(
                    tuple_(_VERSIONS.c.entry_id, _VERSIONS.c.number).in_(sorted(other))
                )
            )
            specs = {(e, n): spec for e, n, spec in rows}
        for entry_id, name, version in pointers:
            write = by_id[entry_id]
            spec = write.previous if version == write.base else specs.get((entry_id, version))
            served.setdefault(entry_id, {})[name] = spec
    return served


def write_histories(
    session: Session,
    writes: Sequence[HistoryWrite],
    *,
    actor: Actor | str,
    note: str | None,
    now: datetime,
    closing: Mapping[str, Any] | None = None,
) -> int | None:
    """Create entries with their whole history (versions numbered, authored and dated as given,
    labels and archived state set). One ``created`` change row each (plus ``archived`` for an
    archived entry), dated now: the change log records when this catalog changed."""
    if not writes:
        return None
    _check_new_names(session, writes)
    ids = _insert_entries(
        session,
        [
            {
                "kind": w.kind,
                "name": w.name,
                "latest_version": w.versions[-1].number,
                "archived": w.archived,
                "created_at": w.created_at,
                "updated_at": w.updated_at,
                **denormalized(w.kind, w.versions[-1].spec),
            }
            for w in writes
        ],
    )
    _insert(
        session,
        _VERSIONS,
        [
            {
                "entry_id": i,
                "number": v.number,
                "spec": v.spec,
                "author": v.author,
                "change_note": v.note,
                "created_at": v.created_at,
            }
            for i, w in zip(ids, writes, strict=True)
            for v in w.versions
        ],
    )
    _insert(
        session,
        _LABELS,
        [
            {"entry_id": i, "name": label, "version": number, "updated_at": now}
            for i, w in zip(ids, writes, strict=True)
            for label, number in {**w.labels, LATEST: w.versions[-1].number}.items()
        ],
    )
    changes: list[dict[str, Any]] = []
    for w in writes:
        last = w.versions[-1].number
        specs = {v.number: v.spec for v in w.versions}
        labels = sorted({*w.labels, LATEST})
        served = [specs[n] for n in sorted({*w.labels.values(), last})]
        uris = resource_uris(w.kind, *served)
        # An archived entry is in no list: its rows change none (see Change.listing_changed).
        shown = [] if w.archived else labels
        common = {"created_at": now, "kind": w.kind, "name": w.name, "uris": uris, "actor": actor}
        # The created row names the labels on the newest version (and writes every version); a
        # label_moved row each for the labels on older ones, so replaying the rows gives the labels.
        at_last = [label for label in labels if w.labels.get(label, last) == last]
        changes.append(
            {
                **common,
                "action": "created",
                "version": last,
                "labels": at_last,
                "listing_changed": [label for label in shown if label in at_last],
                "note": note,
                "digest": versions_digest(w.kind, w.name, [(v.number, v.spec) for v in w.versions]),
            }
        )
        for label, number in sorted(w.labels.items()):
            if number != last:
                changes.append(
                    {
                        **common,
                        "action": "label_moved",
                        "version": number,
                        "labels": [label],
                        "listing_changed": [label] if label in shown else [],
                        "note": f"{label}: - -> {number} (imported with its history)",
                        "digest": versions_digest(w.kind, w.name, [(number, specs[number])]),
                    }
                )
        if w.archived:
            changes.append(
                {
                    **common,
                    "action": "archived",
                    "version": last,
                    "labels": labels,
                    "listing_changed": shown,
                    "note": None,
                }
            )
    if closing is not None:
        changes.append(dict(closing))
    return _append_changes(session, changes)


def bundle_event(
    entries: Sequence[tuple[str, str]], *, actor: Actor | str, note: str | None, detail: str, now: datetime
) -> dict[str, Any]:
    """The ``bundle`` governance event that closes an import (in the import's own rows, so one
    lock, one insert and one notification serve both): which entries it wrote (its digest) and
    what it did with labels."""
    count = len(entries)
    return {
        "created_at": now,
        "kind": "bundle",
        "name": (note or "bundle import")[:128],
        "action": "imported",
        "actor": actor,
        "labels": [],
        "listing_changed": [],
        "audience": [],
        "note": f"{count} entr{'y' if count == 1 else 'ies'} written; {detail}",
        "digest": digest(sorted(entries)),
    }


# ------------------------------------------------------------------ the import transactions


@dataclass(frozen=True)
class ImportWritten:
    """What a bundle write did: the last change id, and per (kind, name) the change requests
    opened for the protected labels it did not move."""

    change_id: int | None
    change_requests: dict[tuple[str, str], list[int]] = field(default_factory=dict)


class BulkWriter:
    """A planned bundle import written in one transaction (all or nothing), with the catalog's
    rules for notes and labels (``catalog``) and its protected labels (``protection``): those are
    never moved here; the same transaction opens a change request per entry and label instead."""

    def __init__(self, db: Database, catalog: CatalogService, protection: ProtectionPolicy) -> None:
        self.db = db
        self.catalog = catalog
        self.protection = protection

    def import_targets(self, labels: list[str] | None) -> list[str]:
        """The labels an entry bundle's new versions are given (default production), checked."""
        return check_labels(labels if labels else [PRODUCTION])

    def import_heads(
        self,
        writes: list[HeadWrite],
        *,
        actor: Actor | str,
        note: str | None,
        labels: list[str] | None = None,
        publish_protected: bool = False,
        review_note: str | None = None,
    ) -> ImportWritten:
        """Each write a new version moving ``latest`` and ``labels`` (default production).
        Protected labels stay where they are, as for any save, and the same transaction opens a
        change request per entry and protected label (described by ``review_note``), unless
        ``publish_protected`` (the start-up seed of an empty catalog)."""
        self.catalog.check_note(note)
        target = self.import_targets(labels)
        with _bulk_conflicts(), self.db.session() as session:
            held = {} if publish_protected else self.protection.protected_in(session, target)
            target = [label for label in target if label not in held]
            now = utcnow()
            detail = f"labels moved: latest, {', '.join(target) or 'none other'}"
            detail += f"; held for review: {', '.join(sorted(held))}" if held else ""
            closing = bundle_event([(w.kind, w.name) for w in writes], actor=actor, note=note, detail=detail, now=now)
            change_id = write_heads(session, writes, actor=actor, note=note, labels=target, now=now, closing=closing)
            moves = [(w.kind, w.name, label, (w.base or 0) + 1) for w in writes for label in held]
            written = self._open_imported(session, change_id, moves, held, actor=actor, description=review_note)
        self.catalog.committed(written.change_id)
        return written

    def restore_histories(
        self,
        writes: list[HistoryWrite],
        *,
        actor: Actor | str,
        note: str | None,
        publish_protected: bool = False,
        review_note: str | None = None,
    ) -> ImportWritten:
        """Create entries with their exported history. The bundle's protected-label pointers are
        not restored unless ``publish_protected``: a change request per entry and protected label
        asks to (described by ``review_note``)."""
        self.catalog.check_note(note)
        with _bulk_conflicts(), self.db.session() as session:
            held = {} if publish_protected else self.protection.protected_in(session)
            moves = [(w.kind, w.name, k, v) for w in writes for k, v in w.labels.items() if k in held]
            if held:
                writes = [replace(w, labels={k: v for k, v in w.labels.items() if k not in held}) for w in writes]
            now = utcnow()
            detail = f"protected labels held for review: {', '.join(sorted(held))}" if held else "every label restored"
            closing = bundle_event([(w.kind, w.name) for w in writes], actor=actor, note=note, detail=detail, now=now)
            change_id = write_histories(session, writes, actor=actor, note=note, now=now, closing=closing)
            written = self._open_imported(session, change_id, moves, held, actor=actor, description=review_note)
        self.catalog.committed(written.change_id)
        return written

    def _open_imported(
        self,
        session: Session,
        change_id: int | None,
        moves: list[tuple[str, str, str, int]],
        held: Mapping[str, int],
        *,
        actor: Actor | str,
        description: str | None,
    ) -> ImportWritten:
        """For each (kind, name, protected label, version) a bundle write did not move: a change
        request to move it, in the write's transaction (one per entry and label, as a save opens;
        a pending one asking the same move is reused). Entries are read a chunk at a time. With
        the write's ``change_id``, the transaction's last one once requests are opened."""
        opened: dict[tuple[str, str], list[int]] = {}
        ask, repository = ReviewAsk(description=description), EntryRepository(session, self.catalog.limits)
        for part in chunks(moves):
            by_kind: dict[str, set[str]] = {}
            for kind, name, _label, _version in part:
                by_kind.setdefault(kind, set()).add(name)
            entries: dict[tuple[str, str], Entry] = {}
            for kind, names in by_kind.items():
                stmt = (
                    select(Entry)
                    .where(Entry.kind == kind, Entry.name.in_(sorted(names)))
                    .options(selectinload(Entry.labels))
                )
                entries.update({(kind, entry.name): entry for entry in session.scalars(stmt)})
            for kind, name, label, version in part:
                entry = entries[(kind, name)]
                ids = repository.open_held(entry, {label: held[label]}, version, actor=actor, review=ask)
                if ids:
                    opened.setdefault((kind, name), []).extend(ids)
        if opened:
            count = sum(len(ids) for ids in opened.values())
            log.info("bundle import: protected label(s) %s held; %d change request(s)", ", ".join(sorted(held)), count)
            change_id = last_change_id(session)
        return ImportWritten(change_id, opened)


@contextmanager
def _bulk_conflicts() -> Iterator[None]:
    """A bulk write that meets a unique constraint (an entry or resource URI created concurrently)
    rolled back whole: a 409 that says so, not a 500."""
    try:
        yield
    except IntegrityError as exc:
        first = (str(exc.orig).strip().splitlines() or ["a unique constraint"])[0]
        raise Conflict(
            f"the import met a concurrent change ({first}); nothing was written: run the import again"
        ) from None


# ------------------------------------------------------------------ reads for planning and export


@dataclass(frozen=True)
class StoredHead:
    entry_id: int
    latest_version: int
    archived: bool
    spec: dict[str, Any]


def stored_heads(session: Session, kind: str, names: Iterable[str]) -> dict[str, StoredHead]:
    """The newest stored version of each named entry that exists (a few queries, whatever the count)."""
    found: dict[str, StoredHead] = {}
    for part in chunks(sorted(set(names))):
        rows = session.execute(
            select(_ENTRIES.c.name, _ENTRIES.c.id, _ENTRIES.c.latest_version, _ENTRIES.c.archived, _VERSIONS.c.spec)
            .join(
                _VERSIONS,
                (_VERSIONS.c.entry_id == _ENTRIES.c.id) & (_VERSIONS.c.number == _ENTRIES.c.latest_version),
            )
            .where(_ENTRIES.c.kind == kind, _ENTRIES.c.name.in_(part))
        )
        for name, entry_id, latest, archived, spec in rows:
            found[name] = StoredHead(entry_id, latest, bool(archived), spec)
    return found


def uri_owners(session: Session, uris: Iterable[str]) -> dict[str, str]:
    """Which resource (by name) holds each of ``uris``, for those that are taken."""
    owners: dict[str, str] = {}
    for part in chunks(sorted(set(uris))):
        rows = session.execute(
            select(_ENTRIES.c.uri, _ENTRIES.c.name).where(_ENTRIES.c.kind == "resource", _ENTRIES.c.uri.in_(part))
        )
        owners.update({uri: name for uri, name in rows})
    return owners


def labels_of(session: Session, entry_ids: Iterable[int]) -> dict[int, dict[str, int]]:
    """entry id -> its labels (without ``latest``) and the versions they name."""
    found: dict[int, dict[str, int]] = {}
    for part in chunks(sorted(set(entry_ids))):
        rows = session.execute(
            select(_LABELS.c.entry_id, _LABELS.c.name, _LABELS.c.version).where(
                _LABELS.c.entry_id.in_(part), _LABELS.c.name != LATEST
            )
        )
        for entry_id, name, version in rows:
            found.setdefault(entry_id, {})[name] = version
    return found


def _seen_by(visible: frozenset[str] | None) -> ColumnElement[bool]:
    """Entries seen by a caller whose ``visible_teams`` is ``visible`` (``registry.catalog.access``):
    global ones and its teams'; every entry for None."""
    if visible is None:
        return true()
    return or_(_ENTRIES.c.team.is_(None), _ENTRIES.c.team.in_(sorted(visible)))


def iter_served(
    session: Session, kind: str, label: str | None, *, visible: frozenset[str] | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, stored spec) of every live entry of ``kind`` seen by ``visible`` (see ``_seen_by``), in
    name order: the version ``label`` serves (entries without that label are left out), or the newest
    version when ``label`` is None. Streamed, so exporting 100,000 entries does not hold them all in memory."""
    stmt = select(_ENTRIES.c.name, _VERSIONS.c.spec).where(
        _ENTRIES.c.kind == kind, _ENTRIES.c.archived.is_(False), _seen_by(visible)
    )
    if label is None:
        stmt = stmt.join(
            _VERSIONS, (_VERSIONS.c.entry_id == _ENTRIES.c.id) & (_VERSIONS.c.number == _ENTRIES.c.latest_version)
        )
    else:
        stmt = stmt.join(_LABELS, (_LABELS.c.entry_id == _ENTRIES.c.id) & (_LABELS.c.name == label)).join(
            _VERSIONS, (_VERSIONS.c.entry_id == _ENTRIES.c.id) & (_VERSIONS.c.number == _LABELS.c.version)
        )
    rows = session.execute(stmt.order_by(_ENTRIES.c.name).execution_options(yield_per=CHUNK))
    for name, spec in rows:
        yield str(name), spec


def iter_histories(session: Session, kind: str, *, visible: frozenset[str] | None = None) -> Iterator[HistoryWrite]:
    """Every entry of ``kind`` (archived ones too) seen by ``visible`` (see ``_seen_by``) with all its
    versions and labels, in name order. Three streamed queries merged in order, not one query per entry."""
    entries = session.execute(
        select(_ENTRIES.c.id, _ENTRIES.c.name, _ENTRIES.c.archived, _ENTRIES.c.created_at, _ENTRIES.c.updated_at)
        .where(_ENTRIES.c.kind == kind, _seen_by(visible))
        .order_by(_ENTRIES.c.name)
        .execution_options(yield_per=CHUNK)
    )
    versions = iter(
        session.execute(
            select(
                _VERSIONS.c.entry_id,
                _VERSIONS.c.number,
                _VERSIONS.c.spec,
                _VERSIONS.c.author,
                _VERSIONS.c.change_note,
                _VERSIONS.c.created_at,
            )
            .join(_ENTRIES, _ENTRIES.c.id == _VERSIONS.c.entry_id)
            .where(_ENTRIES.c.kind == kind, _seen_by(visible))
            .order_by(_ENTRIES.c.name, _VERSIONS.c.number)
            .execution_options(yield_per=CHUNK)
        )
    )
    labels = iter(
        session.execute(
            select(_LABELS.c.entry_id, _LABELS.c.name, _LABELS.c.version)
            .join(_ENTRIES, _ENTRIES.c.id == _LABELS.c.entry_id)
            .where(_ENTRIES.c.kind == kind, _LABELS.c.name != LATEST, _seen_by(visible))
            .order_by(_ENTRIES.c.name, _LABELS.c.name)
            .execution_options(yield_per=CHUNK)
        )
    )
    next_version = next(versions, None)
    next_label = next(labels, None)
    for entry_id, name, archived, created_at, updated_at in entries:
        records: list[VersionRecord] = []
        while next_version is not None and next_version.entry_id == entry_id:
            _e, number, spec, author, note, created = next_version
            records.append(VersionRecord(number, spec, author, note, created))
            next_version = next(versions, None)
        pointers: dict[str, int] = {}
        while next_label is not None and next_label.entry_id == entry_id:
            pointers[next_label.name] = next_label.version
            next_label = next(labels, None)
        yield HistoryWrite(kind, name, records, pointers, bool(archived), created_at, updated_at)
