"""Writes that add no version: a label pointed at a version or removed, an entry archived or
restored, an entry moved to another team. Each is one transaction with its change row; the
``notify`` callback learns the change id once it has committed."""

from __future__ import annotations

from collections.abc import Callable

from registry.catalog.access import check_may
from registry.catalog.errors import Forbidden, Invalid, NotFound, Subject
from registry.catalog.protection import ProtectionPolicy, check_reason
from registry.catalog.repository import EntryRepository, listing_change, uris
from registry.catalog.teams import check_team_name, require_team
from registry.catalog.validation import LATEST, check_labels
from registry.catalog.values import WriteOptions, WriteResult
from registry.db.audit import Actor, as_actor
from registry.db.changelog import append_change
from registry.db.engine import Database
from registry.db.models import Entry, utcnow
from registry.limits import Limits


class EntryMoves:
    """Label moves, archiving and team moves of entries in ``db``; ``protection`` says which
    labels only a change request (or an admin's emergency override) moves."""

    def __init__(
        self, db: Database, protection: ProtectionPolicy, limits: Limits, notify: Callable[[int | None], None]
    ) -> None:
        self.db = db
        self.protection = protection
        self.limits = limits
        self.notify = notify

    def set_label(self, kind: str, name: str, label: str, version: int, options: WriteOptions) -> WriteResult:
        """Point ``label`` at ``version``. A protected label is moved by a change request
        (``registry.catalog.reviews``), or here only as an admin's emergency override: with
        ``options.override_reason``, recorded in the change row (``override``, ``reason``)."""
        (label,) = check_labels([label])
        with self.db.session() as session:
            repo = EntryRepository(session, self.limits)
            entry = repo.require(kind, name, lock=True, access=options.access, role="editor")
            target = repo.version(entry, version)
            if any(lb.name == label and lb.version == version for lb in entry.labels):
                moved_by = as_actor(options.actor)  # nothing moves: no protection to weigh
            else:
                moved_by = self._protected_move(repo, entry, label, options)
            change_id = repo.move_label(entry, label, target, actor=moved_by)
            view = repo.latest_view(entry)
        self.notify(change_id)
        return WriteResult(view, change_id, changed=change_id is not None)

    def delete_label(self, kind: str, name: str, label: str, options: WriteOptions) -> WriteResult:
        """Remove ``label``; a protected one only as an admin's emergency override (``override_reason``)."""
        if label == LATEST:
            raise Invalid("the 'latest' label cannot be removed")
        with self.db.session() as session:
            repo = EntryRepository(session, self.limits)
            entry = repo.require(kind, name, lock=True, access=options.access, role="editor")
            existing = next((lb for lb in entry.labels if lb.name == label), None)
            if existing is None:
                raise NotFound(
                    f"{kind} {name!r} has no label {label!r}",
                    about=Subject(kind=kind, name=name, label=label, missing="label"),
                )
            actor = self._protected_move(repo, entry, label, options)
            old_spec = repo.version(entry, existing.version).spec
            entry.labels.remove(existing)
            change = append_change(
                session,
                kind=kind,
                name=name,
                action="label_deleted",
                version=existing.version,
                labels=[label],
                uris=uris(kind, old_spec),
                actor=actor,
                team=entry.team,
                listing_changed=listing_change(kind, entry, [label], {label: old_spec}, None),
            )
            session.flush()
            view = repo.latest_view(entry)
            change_id = change.id
        self.notify(change_id)
        return WriteResult(view, change_id)

    def set_archived(self, kind: str, name: str, archived: bool, options: WriteOptions) -> WriteResult:
        with self.db.session() as session:
            repo = EntryRepository(session, self.limits)
            entry = repo.require(kind, name, lock=True, access=options.access, role="editor")
            change_id = None
            if entry.archived != archived:
                entry.archived = archived
                entry.updated_at = utcnow()
                specs = [repo.version(entry, lb.version).spec for lb in entry.labels]
                change = append_change(
                    session,
                    kind=kind,
                    name=name,
                    action="archived" if archived else "restored",
                    version=entry.latest_version,
                    labels=[lb.name for lb in entry.labels],
                    uris=uris(kind, *specs),
                    actor=options.actor,
                    team=entry.team,
                    listing_changed=[lb.name for lb in entry.labels],  # it leaves or rejoins every list
                )
                session.flush()
                change_id = change.id
            view = repo.latest_view(entry)
        self.notify(change_id)
        return WriteResult(view, change_id, changed=change_id is not None)

    def set_team(self, kind: str, name: str, team: str | None, options: WriteOptions) -> WriteResult:
        """Move an entry to ``team`` (None: make it global). ``access`` needs editor on both the
        old and the new team. Who sees it changes, so the change row names every label (each
        label's listing changes for someone) and both audiences, the old and the new."""
        if team is not None:
            check_team_name(team)
        access = options.access
        with self.db.session() as session:
            repo = EntryRepository(session, self.limits)
            entry = repo.require(kind, name, lock=True, access=access, role="editor")
            check_may(access, "editor", team, f"team {team!r}" if team is not None else "global entries")
            if team is not None:
                require_team(session, team, lock=True)
            old = entry.team
            change_id = None
            if old != team:
                entry.team = team
                entry.updated_at = utcnow()
                labels = [lb.name for lb in entry.labels]
                specs = [repo.version(entry, lb.version).spec for lb in entry.labels]
                change = append_change(
                    session,
                    kind=kind,
                    name=name,
                    action="team_moved",
                    version=entry.latest_version,
                    labels=labels,
                    uris=uris(kind, *specs),
                    actor=options.actor,
                    team=team,
                    audience=[old or "*", team or "*"],
                    note=f"team: {old or '-'} -> {team or '-'}",
                    listing_changed=[] if entry.archived else labels,  # it leaves one audience's lists, joins another's
                )
                session.flush()
                change_id = change.id
            view = repo.latest_view(entry)
        self.notify(change_id)
        return WriteResult(view, change_id, changed=change_id is not None)

    def _protected_move(self, repo: EntryRepository, entry: Entry, label: str, options: WriteOptions) -> Actor:
        """Who moves ``label`` of ``entry`` directly (a label move or removal, not a save): as
        given for an unprotected label; for a protected one only an admin's emergency override
        with a reason, recorded as such (``override=True``). Forbidden otherwise."""
        who, override_reason = as_actor(options.actor), options.override_reason
        if label not in self.protection.protected_in(repo.session, [label]):
            return who.with_reason(override_reason.strip()) if override_reason and override_reason.strip() else who
        if override_reason is None or not override_reason.strip():
            raise Forbidden(
                f"label {label!r} is protected: open a change request to move it (POST /api/v1/change-requests; "
                "reviewers approve it), or, as an admin in an emergency, give an override_reason"
            )
        reason = check_reason(override_reason, "an emergency override of a protected label", self.limits)
        if options.access is not None and not options.access.may("admin", entry.team):
            raise Forbidden(
                f"moving the protected label {label!r} without a change request is an emergency override: "
                "only an admin may make one"
            )
        return who.with_reason(reason, override=True)
