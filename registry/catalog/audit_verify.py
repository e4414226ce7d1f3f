"""Verifying the audit trail: the keyed chain, and the tables it describes.

``verify_audit`` proves three things, and names every place where one fails:

1. **The chain**: every row's MAC matches its content under the audit key and links to the row
   before it (``registry.db.audit``). Editing, deleting or reordering a row, or re-computing the
   chain without the key, breaks it at that row.
2. **The tables agree with the chain**: the rows are replayed (labels created, moved and
   deleted; entries archived, restored and moved between teams; change requests opened,
   reviewed and published; labels protected) and the result is compared with the ``entries``,
   ``labels``, ``entry_versions``, ``change_requests``, ``change_request_reviews`` and
   ``protected_labels`` tables. A version whose content differs from the digest its change row
   recorded, a label moved in the database, a review inserted by hand: each is a difference.
3. **Nothing newer was cut off**, given an anchor: the head of the chain (``chain_head``) read
   and kept elsewhere earlier must still be a row of the chain, with the same MAC.

What it cannot prove: that rows newest than the last anchor kept elsewhere were not deleted
(without an anchor, truncating the newest rows leaves a valid shorter chain), nor anything about
someone who holds the audit key and write access to the database (they can write a new chain).

``key_the_chain`` runs when a server prepares its database: a database whose chain was written
before it was keyed (migration 0008's plain SHA-256) gets a keyed ``chain_keyed`` event whose
digest covers every version written before it, a ``cr_recorded`` event for each change request
and a ``label_protection_recorded`` event for each protected label, so from then on those are
checked like the rest.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from registry.catalog.protection import protection_event, request_digest
from registry.db.audit import (
    CHAIN_COLUMNS,
    CHAIN_FORMAT,
    REQUEST_FIELDS,
    REVIEW_FIELDS,
    BrokenLink,
    ChainWalk,
    digest,
    label_ref,
    protection_digest,
    request_ref,
    verify_rows,
    version_digest,
)
from registry.db.audit import request_digest as digest_of_request
from registry.db.changelog import CATALOG_KINDS, CHANGELOG_LOCK_KEY, append_event
from registry.db.engine import Database
from registry.db.models import Change, ChangeRequest, ChangeRequestReview, Entry, EntryVersion, Label, ProtectedLabel

log = logging.getLogger("registry.audit")

#: Rows read per query while verifying.
VERIFY_BATCH = 2000
#: The governance event that starts the keyed chain on a database chained before keys.
KEYED_ACTION = "chain_keyed"
#: Most differences one verification lists (the count is always exact).
MAX_DIFFERENCES = 200

#: Events that leave a label protected (with the digest of how).
PROTECTION_ACTIONS = ("label_protected", "label_protection_changed", "label_protection_recorded")

_COLUMNS = [Change.__table__.c[name] for name in ("id", "hash", *CHAIN_COLUMNS)]


@dataclass(frozen=True)
class ChainHead:
    """The newest row of the chain: keep ``id`` and ``mac`` somewhere else (an anchor)."""

    id: int
    mac: str
    created_at: str

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "mac": self.mac, "created_at": self.created_at}


@dataclass(frozen=True)
class Anchor:
    """A head read earlier: row ``id`` must still be in the chain with this MAC."""

    id: int
    mac: str

    @classmethod
    def parse(cls, value: Any) -> Anchor:
        """From ``{"id": N, "mac": "..."}`` (what ``GET /api/v1/audit/head`` answers)."""
        if not isinstance(value, dict):
            raise ValueError('an anchor is a JSON object {"id": N, "mac": "..."}')
        row_id, mac = value.get("id"), value.get("mac")
        if not isinstance(row_id, int) or isinstance(row_id, bool) or row_id < 1:
            raise ValueError("the anchor's id must be a positive integer")
        if not isinstance(mac, str) or len(mac) != 64:
            raise ValueError("the anchor's mac must be the 64 hex digits the head showed")
        return cls(row_id, mac.lower())


@dataclass(frozen=True)
class Difference:
    """A table that no longer says what the chain recorded, or a chain gap an anchor shows."""

    table: str
    message: str
    #: The change row it concerns, when there is one.
    change_id: int | None = None
    #: What it is about (``prompt pay``, ``change_request:3``, ``label:production``), for
    #: leaving out what a write made during the verification explains.
    subject: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"table": self.table, "message": self.message, "change_id": self.change_id}


@dataclass
class AuditReport:
    """What ``verify_audit`` found."""

    checked: int = 0
    broken: BrokenLink | None = None
    differences: list[Difference] = field(default_factory=list)
    #: How many differences there were (``differences`` holds at most ``MAX_DIFFERENCES``).
    difference_count: int = 0
    #: The first keyed row (None: no row is keyed).
    keyed_from: int | None = None
    head: ChainHead | None = None

    @property
    def intact(self) -> bool:
        return self.broken is None and self.difference_count == 0

    def add(self, table: str, message: str, change_id: int | None = None, subject: str | None = None) -> None:
        self.difference_count += 1
        if len(self.differences) < MAX_DIFFERENCES:
            self.differences.append(Difference(table, message, change_id, subject))

    def forget(self, subjects: set[str]) -> None:
        """Drop the differences about ``subjects`` (changed after the walk; see ``verify_audit``)."""
        kept = [d for d in self.differences if d.subject is None or d.subject not in subjects]
        self.difference_count -= len(self.differences) - len(kept)
        self.differences = kept

    def as_dict(self) -> dict[str, Any]:
        return {
            "intact": self.intact,
            "checked": self.checked,
            "broken": None if self.broken is None else {"id": self.broken.id, "reason": self.broken.reason},
            "differences": [d.as_dict() for d in self.differences],
            "difference_count": self.difference_count,
            "keyed_from": self.keyed_from,
            "head": None if self.head is None else self.head.as_dict(),
        }

    def summary(self) -> str:
        """One line: what an operator reads first."""
        if self.broken is not None:
            return (
                f"audit chain broken at change #{self.broken.id}: {self.broken.reason} "
                f"({self.checked} changes before it verified)"
            )
        if self.difference_count:
            return (
                f"audit chain intact ({self.checked} changes verified), but the tables differ from it "
                f"in {self.difference_count} place{'s' if self.difference_count != 1 else ''}"
            )
        return f"audit chain intact: {self.checked} changes verified, and the tables agree with it"


# ------------------------------------------------------------------ the head


def chain_head(db: Database) -> ChainHead | None:
    """The newest row's id and MAC (None: an empty log)."""
    with db.session() as session:
        row = session.execute(
            select(Change.id, Change.hash, Change.created_at).order_by(Change.id.desc()).limit(1)
        ).first()
    if row is None:
        return None
    return ChainHead(row.id, row.hash, row.created_at.isoformat())


# ------------------------------------------------------------------ keying an old chain


class AuditKeyMismatch(RuntimeError):
    """This process's audit key is not the one the chain's newest row was written with."""


#: The migration that made the chain keyed: a start that applies it keys an older chain.
KEYED_SINCE_REVISION = "0011"


def brings_keys(revision_before: str | None) -> bool:
    """Whether an upgrade from ``revision_before`` (None: an empty database) applies the
    migration that made the chain keyed."""
    return revision_before is None or revision_before < KEYED_SINCE_REVISION


def key_the_chain(db: Database, *, may_key: bool = False) -> bool:
    """Start the keyed chain on a database whose newest row is unkeyed (see the module
    docstring); True when it did. It does so only where the unkeyed rows are known to predate
    keys (``may_key``): in the process whose upgrade applied ``KEYED_SINCE_REVISION``
    (``brings_keys``), or when an operator says so (``mcp-registry audit key``). Anywhere else
    an unkeyed newest row means the chain was re-written without the key, and keying it would
    seal the forgery: it is logged and left for ``audit verify`` to report.

    Refuses (``AuditKeyMismatch``) when the newest keyed row does not verify under this
    process's key: every row it wrote would break the chain, so a process started with another
    key must not write at all."""
    key = db.audit_key
    if key is None:
        raise RuntimeError("the database was opened without an audit key")
    with db.session() as session:
        if db.is_postgres:
            session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": CHANGELOG_LOCK_KEY})
        head = session.execute(select(*_COLUMNS).order_by(Change.id.desc()).limit(1)).first()
        if head is None:
            return False
        if (head.chain_format or 1) >= CHAIN_FORMAT:
            if verify_rows([head], ChainWalk(key, prev_hash=head.prev_hash or "")) is not None:
                raise AuditKeyMismatch(
                    f"the audit chain's newest row (#{head.id}) does not verify under this process's audit key: "
                    "every process that writes to this database (replicas, the CLI) needs the same "
                    "REGISTRY_AUDIT_KEY, or when that is unset the same REGISTRY_SECRET_KEY (or data folder "
                    "secret.key); if the row was edited, `mcp-registry audit verify` says so"
                )
            return False
        if not may_key:
            log.error(
                "the audit chain's newest row (#%d) is unkeyed on a database migrated past %s: the chain was "
                "re-written without the key, or the start that upgraded it stopped before keying it. "
                "`mcp-registry audit verify` says which; `mcp-registry audit key` keys it once you know",
                head.id,
                KEYED_SINCE_REVISION,
            )
            return False
        versions = sorted(version for _where, version in _version_digests(session))
        append_event(
            session,
            kind="audit",
            name="chain",
            action=KEYED_ACTION,
            actor="system",
            note=f"the audit chain is keyed from here; this row's digest covers the {len(versions)} versions "
            "written before it",
            digest=digest(versions),
            ref="chain",
        )
        for request_id in session.scalars(select(ChangeRequest.id).order_by(ChangeRequest.id)):
            append_event(
                session,
                kind="change_request",
                name=f"request #{request_id}",
                action="cr_recorded",
                actor="system",
                note=f"change request #{request_id} as it stood when the audit chain was keyed",
                digest=request_digest(session, request_id),
                ref=request_ref(request_id),
            )
        for label, approvals in session.execute(
            select(ProtectedLabel.name, ProtectedLabel.approvals).order_by(ProtectedLabel.name)
        ):
            note = f"{label}: protected when the audit chain was keyed"
            protection_event(session, label, "label_protection_recorded", approvals, actor="system", note=note)
    log.info("audit chain keyed: the rows written before it are covered by the first keyed row")
    return True


# ------------------------------------------------------------------ verification


@dataclass
class _EntryState:
    """An entry as the chain says it is."""

    created_by: int
    labels: dict[str, tuple[int, int]] = field(default_factory=dict)  # label -> (version, change id)
    archived: bool = False
    team: str | None = None
    #: Labels an unkeyed history import set to versions the row does not say.
    uncertain: set[str] = field(default_factory=set)


@dataclass
class _Replay:
    entries: dict[tuple[str, str], _EntryState] = field(default_factory=dict)
    #: (change id, action, kind, name, versions it wrote or named, the digest it recorded)
    version_claims: list[tuple[int, str, str, str, list[int], str]] = field(default_factory=list)
    #: ref -> (change id, digest) of the newest event about it
    requests: dict[int, tuple[int, str | None]] = field(default_factory=dict)
    review_events: dict[int, int] = field(default_factory=dict)
    #: label -> (change id, digest) of the newest protection event (None digest: unprotected)
    protected: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    baseline: tuple[int, str | None] | None = None
    anchor_mac: str | None = None


def verify_audit(db: Database, *, anchor: Anchor | None = None, batch: int = VERIFY_BATCH) -> AuditReport:
    """Verify the chain and the tables it describes (see the module docstring). Blocking (many
    round trips on a long log): call it off the event loop."""
    key = db.audit_key
    if key is None:
        raise RuntimeError("the database was opened without an audit key: it cannot be verified")
    report = AuditReport()
    walk = ChainWalk(key)
    replay = _Replay()
    after: int | None = None  # from the smallest id, whatever it is (an id below 1 is a row like any other)
    last: Any = None
    while True:
        stmt = select(*_COLUMNS).order_by(Change.id).limit(batch)
        with db.session() as session:
            rows = session.execute(stmt if after is None else stmt.where(Change.id > after)).all()
        if not rows:
            break
        for row in rows:
            broken = verify_rows([row], walk)
            if broken is not None:
                report.checked, report.broken, report.keyed_from = walk.checked, broken, walk.keyed_from
                return report
            _replay(replay, row)
            if anchor is not None and row.id == anchor.id:
                replay.anchor_mac = row.hash
        last = rows[-1]
        after = last.id
    report.checked, report.keyed_from = walk.checked, walk.keyed_from
    if last is not None:
        report.head = ChainHead(last.id, last.hash, last.created_at.isoformat())
        if walk.keyed_from is None:
            report.add(
                "changes",
                f"none of the {walk.checked} rows is keyed: the chain was written before keys (start the server once "
                "to key it) or was re-computed by someone without the key",
            )
    if anchor is not None:
        _check_anchor(report, anchor, replay.anchor_mac)
    with db.session() as session:
        _compare_versions(session, replay, report)
        _compare_entries(session, replay, report)
        _compare_requests(session, replay, report)
        _compare_protection(session, replay, report)
        # Writes committed since the walk ended are in the tables but not in the replay: what they
        # concern is not a difference (it is checked by the next verification).
        newer = session.execute(
            select(Change.kind, Change.name, Change.ref).where(Change.id > (after if after is not None else 0))
        ).all()
    if newer:
        report.forget(_subjects(newer))
    return report


def _subjects(rows: Any) -> set[str]:
    """What rows changed: entries (``kind name``), change requests and labels (their ``ref``)."""
    found: set[str] = set()
    for row in rows:
        if row.kind in CATALOG_KINDS:
            found.add(f"{row.kind} {row.name}")
        elif row.ref:
            found.add(row.ref)
    return found


def _replay(replay: _Replay, row: Any) -> None:
    keyed = (row.chain_format or 1) >= CHAIN_FORMAT
    if row.kind in CATALOG_KINDS:
        _replay_entry(replay, row, keyed)
    elif row.kind == "change_request" and keyed and (request_id := _request_id(row.ref)) is not None:
        replay.requests[request_id] = (row.id, row.digest)
        if row.action in ("cr_approved", "cr_rejected"):
            replay.review_events[request_id] = replay.review_events.get(request_id, 0) + 1
    elif row.kind == "label" and keyed and row.action in PROTECTION_ACTIONS:
        replay.protected[row.name] = (row.id, row.digest)
    elif row.kind == "label" and keyed and row.action == "label_unprotected":
        replay.protected[row.name] = (row.id, None)
    elif row.kind == "audit" and row.action == KEYED_ACTION:
        replay.baseline = (row.id, row.digest)


def _request_id(ref: str | None) -> int | None:
    """The change request a keyed event's ``ref`` names (None: another kind of ref)."""
    prefix, _, number = (ref or "").partition(":")
    return int(number) if prefix == "change_request" and number.isdigit() else None


def _replay_entry(replay: _Replay, row: Any, keyed: bool) -> None:
    key = (row.kind, row.name)
    labels = list(row.labels or [])
    state = replay.entries.get(key)
    if row.action == "created" or state is None:
        state = replay.entries[key] = _EntryState(created_by=row.id, team=row.team)
        if not keyed and row.action == "created" and (row.version or 1) > 1:
            state.uncertain.update(labels)  # an unkeyed history import: its labels are not all at row.version
    if row.action in ("created", "updated", "label_moved"):
        for label in labels:
            state.labels[label] = (row.version, row.id)
            if row.action != "created" or keyed:
                state.uncertain.discard(label)
    elif row.action == "label_deleted":
        for label in labels:
            state.labels.pop(label, None)
            state.uncertain.discard(label)
    elif row.action in ("archived", "restored"):
        state.archived = row.action == "archived"
    elif row.action == "team_moved":
        state.team = row.team
    if keyed and row.digest:
        if row.action == "created":
            covered = list(range(1, (row.version or 1) + 1))
        elif row.action in ("updated", "label_moved"):
            covered = [row.version]
        else:
            return
        replay.version_claims.append((row.id, row.action, row.kind, row.name, covered, row.digest))


def _version_digests(session: Session) -> Iterator[tuple[tuple[str, str, int], str]]:
    """Every version's digest, keyed by (kind, name, number), a batch at a time."""
    after = 0
    while True:
        rows = session.execute(
            select(EntryVersion.id, Entry.kind, Entry.name, EntryVersion.number, EntryVersion.spec)
            .join(Entry, Entry.id == EntryVersion.entry_id)
            .where(EntryVersion.id > after)
            .order_by(EntryVersion.id)
            .limit(VERIFY_BATCH)
        ).all()
        if not rows:
            return
        for row in rows:
            yield (row.kind, row.name, row.number), version_digest(row.kind, row.name, row.number, row.spec)
        after = rows[-1].id


def _compare_versions(session: Session, replay: _Replay, report: AuditReport) -> None:
    versions = dict(_version_digests(session))
    #: Versions a keyed row wrote (created, updated): the rest were written before the chain was
    #: keyed. A label_moved row names a version without writing it, so it does not count here.
    written: set[tuple[str, str, int]] = set()
    for change_id, action, kind, name, numbers, recorded in replay.version_claims:
        keys = [(kind, name, n) for n in numbers]
        if action != "label_moved":
            written.update(keys)
        subject = f"{kind} {name}"
        missing = [n for (_k, _n, n) in keys if (_k, _n, n) not in versions]
        if missing:
            shown = ", ".join(f"v{n}" for n in missing)
            message = f"{kind} {name!r} {shown} is gone (change #{change_id} recorded it)"
            report.add("entry_versions", message, change_id, subject)
            continue
        if digest([versions[k] for k in keys]) != recorded:
            which = f"v{numbers[0]}" if len(numbers) == 1 else f"one of v{numbers[0]}-v{numbers[-1]}"
            message = (
                f"{kind} {name!r} {which} is not what change #{change_id} recorded: its content was changed "
                "in the database"
            )
            report.add("entry_versions", message, change_id, subject)
    earlier = {k: d for k, d in versions.items() if k not in written}
    if replay.baseline is not None:
        baseline_id, baseline_digest = replay.baseline
        if digest(sorted(earlier.values())) != baseline_digest:
            report.add(
                "entry_versions",
                f"the versions written before the chain was keyed are not those change #{baseline_id} recorded: "
                "one was changed, added or deleted in the database",
                baseline_id,
            )
    elif report.keyed_from is not None:
        for kind, name, number in sorted(earlier):
            message = f"{kind} {name!r} v{number} was written by no change (inserted by hand)"
            report.add("entry_versions", message, subject=f"{kind} {name}")


def _compare_entries(session: Session, replay: _Replay, report: AuditReport) -> None:
    tables: dict[tuple[str, str], tuple[bool, str | None, dict[str, int]]] = {}
    for entry in session.execute(select(Entry.id, Entry.kind, Entry.name, Entry.archived, Entry.team)):
        tables[(entry.kind, entry.name)] = (bool(entry.archived), entry.team, {})
    by_id = {row.id: (row.kind, row.name) for row in session.execute(select(Entry.id, Entry.kind, Entry.name))}
    for pointer in session.execute(select(Label.entry_id, Label.name, Label.version)):
        where = by_id.get(pointer.entry_id)
        if where is not None:
            tables[where][2][pointer.name] = pointer.version
    for (kind, name), (archived, team, labels) in sorted(tables.items()):
        subject = f"{kind} {name}"
        state = replay.entries.get((kind, name))
        if state is None:
            report.add("entries", f"{kind} {name!r} has no change row: it was inserted by hand", subject=subject)
            continue
        for label in sorted(set(labels) | set(state.labels)):
            if label in state.uncertain:
                continue
            recorded = state.labels.get(label)
            actual = labels.get(label)
            if recorded is None:
                message = f"{kind} {name!r} {label} -> v{actual}: no change ever moved it there"
                report.add("labels", message, subject=subject)
            elif actual is None:
                message = f"{kind} {name!r} {label} is gone, but change #{recorded[1]} moved it to v{recorded[0]}"
                report.add("labels", message, recorded[1], subject)
            elif actual != recorded[0]:
                message = (
                    f"{kind} {name!r} {label} -> v{actual} in the labels table, but the last change to move it "
                    f"(#{recorded[1]}) moved it to v{recorded[0]}"
                )
                report.add("labels", message, recorded[1], subject)
        if archived != state.archived:
            message = f"{kind} {name!r} is {'archived' if archived else 'not archived'}; the chain says otherwise"
            report.add("entries", message, subject=subject)
        if team != state.team:
            message = f"{kind} {name!r} belongs to team {team!r}; the chain says {state.team!r}"
            report.add("entries", message, subject=subject)
    for kind, name in sorted(set(replay.entries) - set(tables)):
        state = replay.entries[(kind, name)]
        message = f"{kind} {name!r} (created by change #{state.created_by}) is gone"
        report.add("entries", message, state.created_by, f"{kind} {name}")


def _compare_requests(session: Session, replay: _Replay, report: AuditReport) -> None:
    requests = {
        row.id: dict(row._mapping)
        for row in session.execute(select(*(ChangeRequest.__table__.c[f] for f in REQUEST_FIELDS)))
    }
    reviews: dict[int, list[Any]] = {}
    review_columns = (ChangeRequestReview.__table__.c[f] for f in ("request_id", *REVIEW_FIELDS))
    for row in session.execute(select(*review_columns)):
        reviews.setdefault(row.request_id, []).append(dict(row._mapping))
    for request_id, request in sorted(requests.items()):
        subject = request_ref(request_id)
        event = replay.requests.get(request_id)
        own = reviews.get(request_id, [])
        if event is None:
            if report.keyed_from is not None:
                message = f"change request #{request_id} has no event in the chain (inserted by hand)"
                report.add("change_requests", message, subject=subject)
            continue
        change_id, recorded = event
        if recorded is not None and digest_of_request(request, own) != recorded:
            events = replay.review_events.get(request_id, 0)
            report.add(
                "change_request_reviews" if len(own) != events else "change_requests",
                f"change request #{request_id} is not as change #{change_id} (the last event about it) left it: "
                f"{len(own)} review{'s' if len(own) != 1 else ''} in change_request_reviews, {events} review "
                f"event{'s' if events != 1 else ''} in the chain; state {request['state']!r}",
                change_id,
                subject,
            )
    for request_id in sorted(set(replay.requests) - set(requests)):
        change_id, _recorded = replay.requests[request_id]
        message = f"change request #{request_id} (last event: change #{change_id}) is gone"
        report.add("change_requests", message, change_id, request_ref(request_id))


def _compare_protection(session: Session, replay: _Replay, report: AuditReport) -> None:
    table = {row.name: row.approvals for row in session.execute(select(ProtectedLabel.name, ProtectedLabel.approvals))}
    for label in sorted(set(table) | set(replay.protected)):
        subject = label_ref(label)
        event = replay.protected.get(label)
        if event is None:
            if report.keyed_from is not None and label in table:
                message = f"{label} is protected by no event in the chain (inserted by hand)"
                report.add("protected_labels", message, subject=subject)
            continue
        change_id, recorded = event
        if label not in table:
            if recorded is not None:
                message = f"{label} is no longer protected; change #{change_id} protected it"
                report.add("protected_labels", message, change_id, subject)
        elif recorded is None or protection_digest(label, table[label]) != recorded:
            message = f"{label}'s protection is not what change #{change_id} recorded"
            report.add("protected_labels", message, change_id, subject)


def _check_anchor(report: AuditReport, anchor: Anchor, found: str | None) -> None:
    newest = report.head.id if report.head is not None else 0
    if found is None:
        report.add(
            "changes",
            f"the anchor's row #{anchor.id} is not in the chain (the newest is #{newest}): the newest rows were "
            "deleted (the chain was truncated)",
        )
    elif not hmac.compare_digest(found, anchor.mac):
        report.add("changes", f"row #{anchor.id}'s MAC is not the anchor's: the chain was rewritten since", anchor.id)
