"""The catalog service: the one place that reads and writes prompts, resources and tools.

The REST API, the web UI, the CLI importer and the MCP layer all hold one ``CatalogService`` and
call its operations: ``catalog.create(...)``, ``catalog.get(...)``, ``catalog.served_rows(...)``.
It is composed of focused parts, each a class in a module of its own that holds its collaborators:

* ``validation.SpecValidator``: definitions, change notes and labels checked before any write;
* ``sealing.Sealer``: write-only values sealed for storage, masked when shown, revealed for calls;
* ``writes.EntryWrites``: saves of versions (create, update, patch, restore);
* ``entry_moves.EntryMoves``: writes that add no version (labels, archive, team);
* ``reads.EntryReads``: entries, lists, folders, versions, diffs and the change feed as editors see them;
* ``serving.ServingQueries``: what labels serve agents (MCP snapshots, resources, renders, test calls);
* ``repository.EntryRepository``: the unit of work all writes (and change requests) run on a session.

Every write happens in one transaction that also appends to the change log, and after it commits
the ``on_change`` callbacks learn the new change id (the in-process signal; PostgreSQL replicas
learn it through NOTIFY, queued inside the same transaction). A write takes what it writes, then
how (``values.WriteOptions``: who, with which rights, the note, labels, precondition, review).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from registry.catalog import browse, bulk
from registry.catalog.access import Access
from registry.catalog.diffs import to_yaml as to_yaml
from registry.catalog.entry_moves import EntryMoves
from registry.catalog.errors import Conflict
from registry.catalog.protection import ProtectionPolicy, ReviewAsk
from registry.catalog.reads import EntryReads
from registry.catalog.repository import EntryRepository
from registry.catalog.sealing import Sealer, mask, secret_holder
from registry.catalog.secrets import SecretBox
from registry.catalog.serving import ServingQueries
from registry.catalog.validation import PRODUCTION, SpecValidator, UrlGuard, check_labels
from registry.catalog.validation import validation_errors as validation_errors
from registry.catalog.writes import EntryWrites
from registry.db.audit import Actor
from registry.db.changelog import last_change_id
from registry.db.engine import Database
from registry.db.models import Entry, EntryVersion, utcnow
from registry.limits import DEFAULT_LIMITS, Limits

log = logging.getLogger("registry.catalog")


@dataclass(frozen=True)
class ImportPlanItem:
    kind: str
    name: str
    action: str  # create | update | unchanged | restore+update
    source: str = ""
    #: Labels the import points at what it writes at once (``latest`` not listed).
    live: tuple[str, ...] = ()
    #: Protected labels it would move: they stay where they are, and a change request each asks
    #: reviewers to move them (opened by the import).
    review: tuple[str, ...] = ()
    #: Once applied: the change requests opened (or already pending) for ``review``.
    change_requests: tuple[int, ...] = ()


@dataclass(frozen=True)
class ImportWritten:
    """What a bundle write did: the last change id, and per (kind, name) the change requests
    opened for the protected labels it did not move."""

    change_id: int | None
    change_requests: dict[tuple[str, str], list[int]] = field(default_factory=dict)


class CatalogService:
    """The catalog's operations, one way to call each: ``catalog.<operation>``, done by the part
    that owns it (see the module docstring)."""

    #: A stored definition as shown: every write-only value masked (``registry.catalog.sealing``).
    mask = staticmethod(mask)

    def __init__(
        self,
        db: Database,
        secrets: SecretBox,
        *,
        url_guard: UrlGuard | None = None,
        limits: Limits = DEFAULT_LIMITS,
        protection: ProtectionPolicy | None = None,
    ) -> None:
        self.db = db
        self.secrets = secrets
        #: Field sizes and counts every write is checked against (and the MCP layer's pattern caps).
        self.limits = limits
        #: Labels no save moves (by default only those protected through the API).
        self.protection = protection or ProtectionPolicy(db, (), 1)
        self._listeners: list[Callable[[int], None]] = []
        validator, sealer = SpecValidator(limits, url_guard), Sealer(secrets)
        moves = EntryMoves(db, self.protection, limits, self._committed)
        writes = EntryWrites(db, validator, sealer, self.protection, moves, self._committed)
        reads = EntryReads(db, browse.UsageRanking(db))
        serving = ServingQueries(db, limits, reads, sealer)
        self.parse_spec, self.reveal = validator.parse_spec, sealer.reveal
        self.create, self.update, self.patch = writes.create, writes.update, writes.patch
        self.restore_version = writes.restore_version
        self.set_label, self.delete_label = moves.set_label, moves.delete_label
        self.set_archived, self.set_team = moves.set_archived, moves.set_team
        self.get, self.list_entries, self.folders = reads.get, reads.list_entries, reads.folders
        self.versions, self.diff, self.changes = reads.versions, reads.diff, reads.changes
        self.render_prompt, self.tool_to_call = serving.render_prompt, serving.tool_to_call
        self.read_resource, self.prompts_embedding = serving.read_resource, serving.prompts_embedding
        self.served_entries, self.served_rows = serving.served_entries, serving.served_rows
        self.served_rows_of = serving.served_rows_of
        # What the bulk-import hooks below use (they move to the bundle modules: issue 26).
        self._check_note, self._seal_holder = validator.check_note, sealer.seal_holder

    # ----------------------------------------------------------------- change signal
    def on_change(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(change_id)`` after each committed change made through this process."""
        self._listeners.append(listener)

    def _committed(self, change_id: int | None) -> None:
        if change_id is None:
            return
        for listener in list(self._listeners):
            listener(change_id)

    def committed(self, change_id: int | None) -> None:
        """Tell the ``on_change`` listeners about a change another module committed (a change
        request's publication moves a label in a transaction of its own)."""
        self._committed(change_id)

    # ----------------------------------------------------------------- helpers of the bulk-import hooks
    _secret_holder = staticmethod(secret_holder)
    _check_labels = staticmethod(check_labels)

    def _version(self, session: Session, entry: Entry, number: int) -> EntryVersion:
        return EntryRepository(session, self.limits).version(entry, number)

    def _open_held(
        self,
        session: Session,
        entry: Entry,
        held: Mapping[str, int],
        to_version: int,
        *,
        actor: Actor | str,
        review: ReviewAsk | None,
    ) -> list[int]:
        return EntryRepository(session, self.limits).open_held(entry, held, to_version, actor=actor, review=review)

    def latest_stored(
        self, kind: str, name: str, *, access: Access | None = None
    ) -> tuple[Entry, dict[str, Any]] | None:
        """The entry and its newest stored definition (write-only values sealed); None when there
        is no such entry, or ``access`` may not edit it (its stored values are not for them)."""
        with self.db.session() as session:
            entry = session.scalar(select(Entry).where(Entry.kind == kind, Entry.name == name))
            if entry is None or (access is not None and not access.may("editor", entry.team)):
                return None
            return entry, self._version(session, entry, entry.latest_version).spec

    # ----------------------------------------------------------------- bulk (bundles; see registry/catalog/bulk.py)
    @contextmanager
    def bulk_reader(self) -> Iterator[Session]:
        """One read transaction for a bundle plan or an export: a consistent view of the catalog,
        read with the few set-based queries of ``registry.catalog.bulk``."""
        with self.db.session() as session:
            yield session

    def seal(self, kind: str, spec: Mapping[str, Any], previous: Mapping[str, Any] | None) -> dict[str, Any]:
        """The stored form of a canonical definition (``dump_spec`` output), as ``_seal`` makes it of
        a parsed one: write-only values encrypted, masked ones kept from ``previous`` (same rules)."""
        if self._secret_holder(kind, spec) is None:
            return dict(spec)
        stored = json.loads(json.dumps(spec))
        old = self._secret_holder(kind, previous or {}) or {}
        self._seal_holder(self._secret_holder(kind, stored), old, "webhook" if kind == "tool" else "resource")
        return stored

    def import_targets(self, labels: list[str] | None) -> list[str]:
        """The labels an entry bundle's new versions are given (default production), checked."""
        return self._check_labels(labels if labels else [PRODUCTION])

    def protected_now(self, labels: Iterable[str] | None = None) -> dict[str, int]:
        """Which of ``labels`` (all when None) are protected now, for a plan; the write decides
        again in its own transaction."""
        with self.db.session() as session:
            return self.protection.protected_in(session, labels)

    def import_heads(
        self,
        writes: list[bulk.HeadWrite],
        *,
        actor: Actor | str,
        note: str | None,
        labels: list[str] | None = None,
        publish_protected: bool = False,
        review_note: str | None = None,
    ) -> ImportWritten:
        """Write a planned bundle import in one transaction (all or nothing): each write a new
        version moving ``latest`` and ``labels`` (default production). Protected labels stay where
        they are, as for any save, and the same transaction opens a change request per entry and
        protected label (described by ``review_note``), unless ``publish_protected`` (the
        start-up seed of an empty catalog)."""
        self._check_note(note)
        target = self.import_targets(labels)
        with _bulk_conflicts(), self.db.session() as session:
            held = {} if publish_protected else self.protection.protected_in(session, target)
            target = [label for label in target if label not in held]
            now = utcnow()
            closing = bulk.bundle_event(
                [(w.kind, w.name) for w in writes],
                actor=actor,
                note=note,
                detail=_labels_detail(target, held),
                now=now,
            )
            change_id = bulk.write_heads(
                session, writes, actor=actor, note=note, labels=target, now=now, closing=closing
            )
            moves = [(w.kind, w.name, label, (w.base or 0) + 1) for w in writes for label in held]
            opened = self._open_imported(session, moves, held, actor=actor, description=review_note)
            if opened:
                change_id = last_change_id(session)
        self._committed(change_id)
        return ImportWritten(change_id, opened)

    def restore_histories(
        self,
        writes: list[bulk.HistoryWrite],
        *,
        actor: Actor | str,
        note: str | None,
        publish_protected: bool = False,
        review_note: str | None = None,
    ) -> ImportWritten:
        """Create entries with their exported history in one transaction (all or nothing). The
        bundle's protected-label pointers are not restored unless ``publish_protected``: a change
        request per entry and protected label asks to (described by ``review_note``)."""
        self._check_note(note)
        with _bulk_conflicts(), self.db.session() as session:
            held = {} if publish_protected else self.protection.protected_in(session)
            moves = [(w.kind, w.name, k, v) for w in writes for k, v in w.labels.items() if k in held]
            if held:
                writes = [replace(w, labels={k: v for k, v in w.labels.items() if k not in held}) for w in writes]
            now = utcnow()
            detail = f"protected labels held for review: {', '.join(sorted(held))}" if held else "every label restored"
            closing = bulk.bundle_event(
                [(w.kind, w.name) for w in writes], actor=actor, note=note, detail=detail, now=now
            )
            change_id = bulk.write_histories(session, writes, actor=actor, note=note, now=now, closing=closing)
            opened = self._open_imported(session, moves, held, actor=actor, description=review_note)
            if opened:
                change_id = last_change_id(session)
        self._committed(change_id)
        return ImportWritten(change_id, opened)

    def _open_imported(
        self,
        session: Session,
        moves: list[tuple[str, str, str, int]],
        held: Mapping[str, int],
        *,
        actor: Actor | str,
        description: str | None,
    ) -> dict[tuple[str, str], list[int]]:
        """For each (kind, name, protected label, version) a bundle write did not move: a change
        request to move it, in the write's transaction (one per entry and label, as a save opens;
        a pending one asking the same move is reused). Entries are read a chunk at a time."""
        opened: dict[tuple[str, str], list[int]] = {}
        ask = ReviewAsk(description=description)
        for part in bulk.chunks(moves):
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
                ids = self._open_held(session, entry, {label: held[label]}, version, actor=actor, review=ask)
                if ids:
                    opened.setdefault((kind, name), []).extend(ids)
        if opened:
            count = sum(len(ids) for ids in opened.values())
            log.info("bundle import: protected label(s) %s held; %d change request(s)", ", ".join(sorted(held)), count)
        return opened


def _labels_detail(moved: list[str], held: Mapping[str, int]) -> str:
    """What a bundle import's closing event says it did with labels."""
    detail = f"labels moved: latest, {', '.join(moved) or 'none other'}"
    return f"{detail}; held for review: {', '.join(sorted(held))}" if held else detail


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
