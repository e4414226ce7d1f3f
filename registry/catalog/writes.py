"""Writes that save a version: a new entry, a full replacement, a merge patch, a restore of an
older version.

Each is one transaction that also appends to the change log; after it commits the ``notify``
callback learns the new change id. Protected labels are never moved by a save: they come back as
``held``, with a change request each when ``WriteOptions.review`` asks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from registry.catalog.access import check_may
from registry.catalog.entry_moves import EntryMoves
from registry.catalog.errors import Conflict, Invalid, PreconditionFailed, Subject
from registry.catalog.merge_patch import merge_patch
from registry.catalog.preconditions import IfMatch, parse_if_match
from registry.catalog.protection import ProtectionPolicy
from registry.catalog.repository import EntryRepository, denormalize, listing_change, uri_taken, uris
from registry.catalog.sealing import Sealer, mask
from registry.catalog.specs import ResourceSpec, Spec
from registry.catalog.teams import check_team_name, require_team
from registry.catalog.validation import LATEST, PRODUCTION, SpecValidator, check_labels
from registry.catalog.values import EntryView, WriteOptions, WriteResult
from registry.db.audit import as_actor, versions_digest
from registry.db.changelog import append_change
from registry.db.engine import Database
from registry.db.models import Entry, EntryVersion, utcnow


def name_taken(kind: str, name: str) -> str:
    """The 409 of a name another entry holds, worded for a caller who may not see that entry.

    Names (and resource URIs) are the catalog's global keys, by which agents address entries: they
    are unique across teams, and so not secret. Trying to create one tells whether it is taken,
    never whose it is nor anything of it (README, security model)."""
    return (
        f"the {kind} name {name!r} is taken (perhaps by an entry of a team you cannot see): names are unique "
        "across the catalog; choose another"
    )


@contextmanager
def _unique_violations_as_conflict(kind: str, spec: Spec, *, updating: bool = False) -> Iterator[None]:
    """A concurrent writer committed the same name, resource URI or version number after our checks:
    the database's unique constraints refuse the second write, which is a 409/412, not a 500."""
    try:
        yield
    except IntegrityError as exc:
        message = str(exc.orig)
        if isinstance(spec, ResourceSpec) and ("uq_entries_uri" in message or "entries.uri" in message):
            raise Conflict(uri_taken(spec.identity_uri)) from None
        if updating:
            raise PreconditionFailed(
                f"{kind} {spec.name!r} was changed concurrently; reload and re-apply your edit"
            ) from None
        raise Conflict(name_taken(kind, spec.name)) from None


class _Unchanged(Exception):
    """Internal: a save equals the newest version; carries that version's view."""

    def __init__(self, view: EntryView) -> None:
        super().__init__(view.name)
        self.view = view


class _BaseMoved(Exception):
    """Internal: another save landed between a merge patch's read and its write."""


class EntryWrites:
    """Saves versions of entries in ``db``: definitions checked by ``validator``, write-only values
    sealed by ``sealer``, protected labels (``protection``) held; an unchanged save that names
    labels moves them through ``moves``."""

    #: How often a merge patch is re-applied when other saves keep landing between its read and its write.
    PATCH_ATTEMPTS = 3

    def __init__(
        self,
        db: Database,
        validator: SpecValidator,
        sealer: Sealer,
        protection: ProtectionPolicy,
        moves: EntryMoves,
        notify: Callable[[int | None], None],
    ) -> None:
        self.db = db
        self.validator = validator
        self.sealer = sealer
        self.protection = protection
        self.moves = moves
        self.notify = notify

    def create(
        self, kind: str, raw: Mapping[str, Any], options: WriteOptions, *, team: str | None = None
    ) -> WriteResult:
        """A new entry, owned by ``team`` (None: global); ``access`` needs editor on it. A team
        ``access`` does not belong to answers like one that does not exist.

        Protected labels among ``labels`` (default ``production``) are not given to it: they come
        back as ``held``, with a change request each (``change_requests``) when ``review`` asks."""
        actor, note, access = options.actor, options.note, options.access
        self.validator.check_note(note)
        if team is not None:
            check_team_name(team)
        check_may(access, "editor", team, f"team {team!r}" if team is not None else f"a global {kind}")
        spec = self.validator.parse_spec(kind, raw)
        target_labels = check_labels(options.labels if options.labels else [PRODUCTION])
        with _unique_violations_as_conflict(kind, spec), self.db.session() as session:
            repo = EntryRepository(session, self.validator.limits)
            if team is not None:
                require_team(session, team, lock=True)  # held against a concurrent delete of the team
            existing = session.scalar(select(Entry).where(Entry.kind == kind, Entry.name == spec.name))
            if existing is not None:
                if access is not None and not access.sees(existing.team):
                    raise Conflict(name_taken(kind, spec.name))  # taken, not whose (nor archived or not)
                hint = " (archived: restore it instead)" if existing.archived else ""
                raise Conflict(f"{kind} {spec.name!r} already exists{hint}", about=Subject(kind=kind, name=spec.name))
            repo.check_uri_free(spec, None, access)
            stored = self.sealer.seal(spec, None)
            now = utcnow()
            entry = Entry(
                kind=kind, name=spec.name, latest_version=1, archived=False, created_at=now, updated_at=now, team=team
            )
            denormalize(entry, spec)
            entry.versions.append(
                EntryVersion(number=1, spec=stored, author=as_actor(actor).name, change_note=note, created_at=now)
            )
            session.add(entry)
            session.flush()
            held = self.protection.protected_in(session, target_labels)
            moved = repo.move_labels(entry, [LATEST, *(lb for lb in target_labels if lb not in held)], 1)
            change = append_change(
                session,
                kind=kind,
                name=spec.name,
                action="created",
                version=1,
                labels=moved,
                uris=uris(kind, stored),
                actor=actor,
                team=entry.team,
                note=note,
                listing_changed=moved,  # a new entry appears in every label it is given
                digest=versions_digest(kind, spec.name, [(1, stored)]),
            )
            session.flush()
            opened = repo.open_held(entry, held, 1, actor=actor, review=options.review)
            view = repo.view(entry, entry.versions[0])
            change_id = change.id
        self.notify(change_id)
        return WriteResult(view, change_id, held=sorted(held), change_requests=opened)

    def update(
        self, kind: str, name: str, raw: Mapping[str, Any], options: WriteOptions, *, secrets_from: int | None = None
    ) -> WriteResult:
        """Save ``raw`` as the entry's new version (a full replacement).

        ``secrets_from``: the version whose stored write-only values a masked value (``********``)
        keeps (default: the newest). An editor opened on an older version sends that version's
        masked headers and secret: they mean "as that version had them", not "as the newest has".

        A save whose result equals the newest version (write-only values compared decrypted)
        writes nothing and answers that version (``changed=False``): re-saving what is there
        must not add a version, a change-log row and notifications. Labels the caller named
        explicitly are still pointed at that version (label moves); the default ``production``
        is not, so an unchanged save never publishes anything by itself.

        Protected labels are never moved by a save: they come back as ``held`` (with a change
        request each, opened in the same transaction, when ``review`` asks for them).
        """
        condition = parse_if_match(options.if_match) if options.if_match is not None else None  # 400 before any work
        try:
            return self._save_version(kind, name, raw, options, condition=condition, secrets_from=secrets_from)
        except _Unchanged as unchanged:
            return self._unchanged_save(kind, name, unchanged.view, options)

    def restore_version(self, kind: str, name: str, number: int, options: WriteOptions) -> WriteResult:
        """Save version ``number``'s definition again, as the entry's new version ("Restore v6").

        The new version is a copy of the stored one, write-only values included (as that version
        had them, not the newest). Only ``latest`` moves to it: publishing it is a label move of its
        own (reviewed, for a protected label), so a restore never changes what agents are served.
        The note defaults to "Restore vN". It is a save like any other: checked against today's
        rules (an old version may fail them: 422), refused for an archived entry, held to
        ``If-Match``; restoring what the newest version already says writes nothing.
        """
        condition = parse_if_match(options.if_match) if options.if_match is not None else None
        with self.db.session() as session:
            repo = EntryRepository(session, self.validator.limits)
            entry = repo.require(kind, name, access=options.access, role="editor")
            stored = json.loads(json.dumps(repo.version(entry, number).spec))
        note = options.note if options.note is not None else f"Restore v{number}"
        try:
            return self._save_version(
                kind,
                name,
                mask(kind, stored),
                replace(options, note=note, labels=None, review=None),
                condition=condition,
                sealed=stored,
                default_labels=(),
            )
        except _Unchanged as unchanged:
            return WriteResult(unchanged.view, None, changed=False)

    def patch(self, kind: str, name: str, patch: Mapping[str, Any], options: WriteOptions) -> WriteResult:
        """Apply a JSON Merge Patch (RFC 7396) to the newest version and save the result.

        The patch applies to the entry as the API shows it: write-only values are ``********``
        there, and left so they keep their stored values (as long as the URL keeps its origin).
        ``template`` replaces ``messages`` (its shorthand). The read and the save are tied by the
        version they saw: a save that lands in between makes the patch re-apply to the new
        version (or answer 412 when ``If-Match`` names the old one), so no edit is lost.
        """
        condition = parse_if_match(options.if_match) if options.if_match is not None else None
        if "name" in patch:
            raise Invalid("a merge patch cannot contain 'name': the URL names the entry, and entries are not renamed")
        for _attempt in range(self.PATCH_ATTEMPTS):
            with self.db.session() as session:
                repo = EntryRepository(session, self.validator.limits)
                entry = repo.require(kind, name, access=options.access, role="editor")
                base = entry.latest_version
                current = mask(kind, repo.version(entry, base).spec)
            # The result is validated (422) before If-Match is weighed (412), as for a full save.
            if patch.get("template") is not None and "messages" not in patch:
                current.pop("messages", None)  # the shorthand replaces the messages
            merged = merge_patch(current, patch)
            try:
                return self._save_version(kind, name, merged, options, condition=condition, base_version=base)
            except _Unchanged as unchanged:
                return self._unchanged_save(kind, name, unchanged.view, options)
            except _BaseMoved:
                continue
        raise PreconditionFailed(f"{kind} {name!r} keeps changing while the patch is applied; retry")

    def _unchanged_save(self, kind: str, name: str, view: EntryView, options: WriteOptions) -> WriteResult:
        change_id = None
        wanted = [label for label in check_labels(options.labels or []) if view.labels.get(label) != view.version]
        if not wanted:
            return WriteResult(view, change_id, changed=False)
        with self.db.session() as session:
            held = self.protection.protected_in(session, wanted)
        mover = WriteOptions(actor=options.actor, access=options.access)
        for label in wanted:
            if label not in held:
                moved = self.moves.set_label(kind, name, label, view.version, mover)
                view, change_id = moved.view, moved.change_id or change_id
        opened: list[int] = []
        if held and options.review is not None:
            with self.db.session() as session:
                repo = EntryRepository(session, self.validator.limits)
                entry = repo.require(kind, name, lock=True, access=options.access, role="editor")
                opened = repo.open_held(entry, held, view.version, actor=options.actor, review=options.review)
        return WriteResult(view, change_id, changed=False, held=sorted(held), change_requests=opened)

    def _save_version(
        self,
        kind: str,
        name: str,
        raw: Mapping[str, Any],
        options: WriteOptions,
        *,
        condition: IfMatch | None,
        base_version: int | None = None,
        secrets_from: int | None = None,
        sealed: Mapping[str, Any] | None = None,
        default_labels: tuple[str, ...] = (PRODUCTION,),
    ) -> WriteResult:
        """One new version. ``sealed``: the stored form to save as is (a restore: already sealed);
        else ``raw`` is sealed here, masked values taken from ``secrets_from`` (default the newest).
        ``default_labels``: what the version is published to when ``labels`` names none."""
        actor, note, access = options.actor, options.note, options.access
        self.validator.check_note(note)
        raw = dict(raw)
        if raw.setdefault("name", name) != name:
            raise Invalid(f"the body names {raw['name']!r} but the URL names {name!r}; entries cannot be renamed")
        spec = self.validator.parse_spec(kind, raw)
        target_labels = check_labels(options.labels if options.labels else list(default_labels))
        with _unique_violations_as_conflict(kind, spec, updating=True), self.db.session() as session:
            repo = EntryRepository(session, self.validator.limits)
            entry = repo.require(kind, name, lock=True, access=access, role="editor")
            if entry.archived:
                raise Conflict(
                    f"{kind} {name!r} is archived; restore it before editing", about=Subject(kind=kind, name=name)
                )
            base = entry.latest_version
            if condition is not None and not condition.matches(base):
                raise PreconditionFailed(
                    f"{kind} {name!r} changed since you read it (now version {base}); reload and re-apply your edit",
                    about=Subject(kind=kind, name=name, version=base),
                )
            if base_version is not None and base != base_version:
                raise _BaseMoved()
            repo.check_uri_free(spec, entry.id, access)
            current = repo.version(entry, base)
            previous = current.spec
            if sealed is not None:
                stored = json.loads(json.dumps(sealed))
            else:
                kept = previous if secrets_from in (None, base) else repo.version(entry, secrets_from).spec
                stored = self.sealer.seal(spec, kept)
            if self.sealer.same_content(kind, previous, stored):
                raise _Unchanged(repo.view(entry, current))  # rolls back: nothing was written
            number = base + 1
            now = utcnow()
            # Compare-and-swap on the version counter: even without a row lock, a concurrent
            # writer that read the same base cannot also succeed.
            swapped = session.execute(
                update(Entry)
                .where(Entry.id == entry.id, Entry.latest_version == base)
                .values(latest_version=number, updated_at=now)
                .execution_options(synchronize_session=False)
            )
            if swapped.rowcount != 1:  # type: ignore[attr-defined]
                raise PreconditionFailed(f"{kind} {name!r} was changed concurrently; reload and re-apply your edit")
            entry.latest_version = number
            entry.updated_at = now
            denormalize(entry, spec)
            version = EntryVersion(
                entry_id=entry.id,
                number=number,
                spec=stored,
                author=as_actor(actor).name,
                change_note=note,
                created_at=now,
            )
            session.add(version)
            held = self.protection.protected_in(session, target_labels)
            moving = [LATEST, *(label for label in target_labels if label not in held)]
            served_before = repo.served_specs(entry, moving, {base: previous})
            moved = repo.move_labels(entry, moving, number)
            change = append_change(
                session,
                kind=kind,
                name=name,
                action="updated",
                version=number,
                labels=moved,
                uris=uris(kind, previous, stored),
                actor=actor,
                team=entry.team,
                note=note,
                listing_changed=listing_change(kind, entry, moved, served_before, stored),
                digest=versions_digest(kind, name, [(number, stored)]),
            )
            session.flush()
            opened = repo.open_held(entry, held, number, actor=actor, review=options.review)
            view = repo.view(entry, version)
            change_id = change.id
        self.notify(change_id)
        return WriteResult(view, change_id, held=sorted(held), change_requests=opened)
