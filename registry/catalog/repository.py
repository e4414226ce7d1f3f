"""The unit of work of catalog writes: an ``EntryRepository`` opened on one transaction's session.

Every write of the catalog service, and a change request's publication (``registry.catalog.reviews``,
which moves a label inside its own transaction), reads and changes entries through one: the entry
found (and locked) as ``access`` may see it, its versions, its label moves with their change rows,
and the change requests a save opens for the protected labels it held. Committing, and telling the
``on_change`` listeners afterwards, is the caller's: the repository never commits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.catalog.access import Access, check_may, check_sees
from registry.catalog.errors import Conflict, NotFound, Subject
from registry.catalog.listing import listing_changed
from registry.catalog.protection import ReviewAsk, check_request_text, open_request, pending_request
from registry.catalog.sealing import mask
from registry.catalog.specs import KINDS, ResourceSpec, Spec
from registry.catalog.values import EntryView
from registry.db.audit import Actor, versions_digest
from registry.db.changelog import append_change
from registry.db.models import Entry, EntryVersion, Label, utcnow
from registry.limits import DEFAULT_LIMITS, Limits


def uri_taken(uri: str) -> str:
    """The 409 of a resource URI another entry holds, worded for a caller who may not see that entry
    (as ``registry.catalog.writes.name_taken`` for names)."""
    return (
        f"the resource URI {uri!r} is taken (perhaps by a resource of a team you cannot see): URIs are unique "
        "across the catalog; choose another"
    )


def uris(kind: str, *specs: Mapping[str, Any] | None) -> list[str]:
    """The resource URIs (or URI templates) of ``specs``, for a change row; none for other kinds."""
    if kind != "resource":
        return []
    return sorted({s.get("uri") or s.get("uriTemplate") or "" for s in specs if s} - {""})


def listing_change(
    kind: str,
    entry: Entry,
    moved: Iterable[str],
    before: Mapping[str, Mapping[str, Any] | None],
    after: Mapping[str, Any] | None,
) -> list[str]:
    """The labels of ``moved`` whose MCP list items differ after the move (for the change row:
    ``*/list_changed`` is sent for those only). An archived entry is in no list: none."""
    if entry.archived:
        return []
    return listing_changed(kind, moved, before, after)


def denormalize(entry: Entry, spec: Spec) -> None:
    """Copy what lists and searches read of ``spec`` onto its entry's row."""
    entry.title = spec.title
    entry.description = spec.description
    entry.tags = "," + ",".join(spec.tags) + ("," if spec.tags else "")
    if isinstance(spec, ResourceSpec):
        entry.uri = spec.identity_uri


class EntryRepository:
    """Entries read and changed in ``session``'s transaction (see the module docstring); ``limits``
    bound the change requests it opens."""

    def __init__(self, session: Session, limits: Limits = DEFAULT_LIMITS) -> None:
        self.session = session
        self.limits = limits

    def require(
        self, kind: str, name: str, *, lock: bool = False, access: Access | None = None, role: str | None = None
    ) -> Entry:
        """The entry, seen by ``access`` (and with ``role`` on its team when given): one hidden
        from ``access`` answers exactly like a missing one (``registry.catalog.access``).
        ``lock``: locked for the rest of the transaction (a change request's publication moves its
        label under this lock)."""
        if kind not in KINDS:
            raise NotFound(f"unknown kind {kind!r}")
        stmt = select(Entry).where(Entry.kind == kind, Entry.name == name)
        entry = self.session.scalar(stmt.with_for_update() if lock else stmt)
        missing = Subject(kind=kind, name=name, missing="entry")
        if entry is None:
            raise NotFound(f"{kind} {name!r} does not exist", about=missing)
        # A hidden one answers as a missing one does: the same words, pointing the same way.
        if role is not None:
            check_may(access, role, entry.team, f"{kind} {name!r}", about=missing)
        else:
            check_sees(access, entry.team, f"{kind} {name!r}", about=missing)
        return entry

    def version(self, entry: Entry, number: int) -> EntryVersion:
        """One version of ``entry`` (404 when it has no such version)."""
        version = self.session.scalar(
            select(EntryVersion).where(EntryVersion.entry_id == entry.id, EntryVersion.number == number)
        )
        if version is None:
            raise NotFound(
                f"{entry.kind} {entry.name!r} has no version {number} (its newest is v{entry.latest_version})",
                about=Subject(kind=entry.kind, name=entry.name, version=number, missing="version"),
            )
        return version

    @staticmethod
    def view(entry: Entry, version: EntryVersion) -> EntryView:
        """``version`` of ``entry`` as the API shows it (write-only values masked)."""
        return EntryView(
            kind=entry.kind,
            name=entry.name,
            version=version.number,
            latest_version=entry.latest_version,
            spec=mask(entry.kind, version.spec),
            labels={label.name: label.version for label in entry.labels},
            archived=entry.archived,
            author=version.author,
            change_note=version.change_note,
            created_at=entry.created_at,
            updated_at=entry.updated_at,
            team=entry.team,
            saved_at=version.created_at,
        )

    def latest_view(self, entry: Entry) -> EntryView:
        """The newest version of ``entry`` as the API shows it."""
        return self.view(entry, self.version(entry, entry.latest_version))

    def check_uri_free(self, spec: Spec, entry_id: int | None, access: Access | None = None) -> None:
        """409 when another resource than ``entry_id`` already uses ``spec``'s URI."""
        if not isinstance(spec, ResourceSpec):
            return
        other = self.session.scalar(select(Entry).where(Entry.kind == "resource", Entry.uri == spec.identity_uri))
        if other is not None and other.id != entry_id:
            if access is not None and not access.sees(other.team):  # URIs are unique: say so, not whose
                raise Conflict(uri_taken(spec.identity_uri))
            raise Conflict(f"resource {other.name!r} already uses {spec.identity_uri!r}")

    @staticmethod
    def move_labels(entry: Entry, labels: Iterable[str], version: int) -> list[str]:
        """Point ``labels`` at ``version``; return the ones that actually moved."""
        current = {label.name: label for label in entry.labels}
        moved = []
        now = utcnow()
        for name in labels:
            label = current.get(name)
            if label is None:
                entry.labels.append(Label(name=name, version=version, updated_at=now))
                moved.append(name)
            elif label.version != version:
                label.version = version
                label.updated_at = now
                moved.append(name)
        return moved

    def move_label(
        self, entry: Entry, label: str, target: EntryVersion, *, actor: Actor | str, note: str | None = None
    ) -> int | None:
        """Point ``label`` of ``entry`` (locked by the caller) at ``target``, with its ``label_moved``
        change row (``note`` added to the row's own); the change id, None when it already pointed
        there. Protection is the caller's to weigh."""
        old = next((lb.version for lb in entry.labels if lb.name == label), None)
        moved = self.move_labels(entry, [label], target.number)
        if not moved:
            return None
        old_spec = self.version(entry, old).spec if old is not None else None
        summary = f"{label}: {old if old is not None else '-'} -> {target.number}"
        change = append_change(
            self.session,
            kind=entry.kind,
            name=entry.name,
            action="label_moved",
            version=target.number,
            labels=moved,
            uris=uris(entry.kind, old_spec, target.spec),
            actor=actor,
            team=entry.team,
            note=f"{summary} ({note})" if note else summary,
            listing_changed=listing_change(entry.kind, entry, moved, {label: old_spec}, target.spec),
            digest=versions_digest(entry.kind, entry.name, [(target.number, target.spec)]),
        )
        self.session.flush()
        return change.id

    def served_specs(
        self, entry: Entry, labels: Iterable[str], known: Mapping[int, Mapping[str, Any]] | None = None
    ) -> dict[str, Mapping[str, Any] | None]:
        """The stored definition each of ``labels`` serves of ``entry`` right now (read before the
        labels move, to tell whether the move changes what MCP lists show). ``known``: versions
        already loaded, by number. An archived entry serves nothing. A few indexed reads: this
        entry's labels only, whatever the size of the catalog."""
        if entry.archived:
            return {}
        wanted = set(labels)
        specs: dict[int, Mapping[str, Any]] = dict(known or {})
        served: dict[str, Mapping[str, Any] | None] = {}
        for label in entry.labels:
            if label.name in wanted:
                if label.version not in specs:
                    specs[label.version] = self.version(entry, label.version).spec
                served[label.name] = specs[label.version]
        return served

    def open_held(
        self, entry: Entry, held: Mapping[str, int], to_version: int, *, actor: Actor | str, review: ReviewAsk | None
    ) -> list[int]:
        """Open a change request per held label (``held``: label -> approvals it needs) that does
        not already serve ``to_version``, in this transaction; none unless asked (``review``)."""
        if review is None or not held:
            return []
        title, description = check_request_text(review.title, review.description, self.limits)
        current = {label.name: label.version for label in entry.labels}
        opened = []
        for label in sorted(held):
            if current.get(label) == to_version:
                continue
            pending = pending_request(self.session, entry.kind, entry.name, label, to_version)
            if pending is not None:
                opened.append(pending)
                continue
            request = open_request(
                self.session,
                kind=entry.kind,
                name=entry.name,
                team=entry.team,
                label=label,
                from_version=current.get(label),
                to_version=to_version,
                actor=actor,
                approvals_required=held[label],
                title=title,
                description=description,
                publish_when_approved=review.publish_when_approved,
            )
            opened.append(request.id)
        return opened
