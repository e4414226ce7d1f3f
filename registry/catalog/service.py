"""The catalog service: the one place that reads and writes prompts, resources and tools.

The REST API, the web UI, the CLI importer and the MCP layer all go through this class; routers
stay thin. Every write happens in one transaction that also appends to the change log, and
after it commits the ``on_change`` callbacks learn the new change id (the in-process signal;
PostgreSQL replicas learn it through NOTIFY, queued inside the same transaction).
"""

from __future__ import annotations

import difflib
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
import yaml
from pydantic import ValidationError
from sqlalchemy import ColumnElement, Select, Text, cast, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from registry.catalog import browse
from registry.catalog.access import Access, check_may, check_sees
from registry.catalog.checks import embeds
from registry.catalog.errors import Conflict, Forbidden, Invalid, NotFound, PreconditionFailed, Subject
from registry.catalog.listing import listing_changed
from registry.catalog.merge_patch import merge_patch
from registry.catalog.preconditions import IfMatch, make_etag, parse_if_match
from registry.catalog.protection import (
    ProtectionPolicy,
    ReviewAsk,
    check_reason,
    check_request_text,
    open_request,
    pending_request,
)
from registry.catalog.rendering import (
    ArgumentError,
    PromptRenderer,
    ResourceRenderer,
    check_prompt_templates,
    check_resource_templates,
)
from registry.catalog.secrets import MASK, SecretBox
from registry.catalog.specs import (
    KINDS,
    SPEC_MODELS,
    PromptSpec,
    ResourceSpec,
    Spec,
    ToolSpec,
    dump_spec,
    is_label,
)
from registry.catalog.teams import GLOBAL_ONLY, check_team_name, require_team
from registry.catalog.templates import TemplateError
from registry.db import search
from registry.db.audit import Actor, as_actor, versions_digest
from registry.db.changelog import append_change, last_change_id
from registry.db.engine import Database
from registry.db.models import Change, Entry, EntryVersion, Label, utcnow
from registry.limits import DEFAULT_LIMITS, LimitExceeded, Limits, env_name

log = logging.getLogger("registry.catalog")

LATEST = "latest"
PRODUCTION = "production"

#: Checks an outbound URL (webhook or http resource) at save time; raises ValueError to refuse it.
UrlGuard = Callable[[str], None]


@dataclass(frozen=True)
class EntryView:
    """One version of an entry as the API shows it (write-only values masked)."""

    kind: str
    name: str
    version: int
    latest_version: int
    spec: dict[str, Any]
    labels: dict[str, int]
    archived: bool
    author: str
    change_note: str | None
    created_at: datetime
    updated_at: datetime
    #: The team that owns the entry; None: a global entry, seen by everyone.
    team: str | None = None
    #: When this version was saved (``created_at`` and ``updated_at`` are the entry's).
    saved_at: datetime | None = None

    @property
    def etag(self) -> str:
        return make_etag(self.latest_version)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "version": self.version,
            "latest_version": self.latest_version,
            "labels": self.labels,
            "archived": self.archived,
            "team": self.team,
            "author": self.author,
            "change_note": self.change_note,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "spec": self.spec,
        }


@dataclass
class Page:
    items: list[dict[str, Any]]
    total: int
    limit: int
    offset: int
    #: False when ``total`` stopped counting at ``registry.db.search.EXACT_COUNT_UP_TO``.
    total_exact: bool = True


@dataclass(frozen=True)
class WriteResult:
    view: EntryView
    change_id: int | None = None
    changed: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    #: Protected labels the save would have moved but left where they were (``registry.catalog.protection``).
    held: list[str] = field(default_factory=list)
    #: Ids of the change requests the save opened to move them (when it was asked to).
    change_requests: list[int] = field(default_factory=list)


def etag_matches(if_match: str, current_version: int) -> bool:
    """Whether ``If-Match`` admits a save on top of ``current_version``; raises
    ``MalformedPrecondition`` (400) for a value that is not an If-Match (see registry/catalog/preconditions.py)."""
    return parse_if_match(if_match).matches(current_version)


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


def name_taken(kind: str, name: str) -> str:
    """The 409 of a name another entry holds, worded for a caller who may not see that entry.

    Names (and resource URIs) are the catalog's global keys, by which agents address entries: they
    are unique across teams, and so not secret. Trying to create one tells whether it is taken,
    never whose it is nor anything of it (README, security model)."""
    return (
        f"the {kind} name {name!r} is taken (perhaps by an entry of a team you cannot see): names are unique "
        "across the catalog; choose another"
    )


def uri_taken(uri: str) -> str:
    """As ``name_taken``, for a resource's URI."""
    return (
        f"the resource URI {uri!r} is taken (perhaps by a resource of a team you cannot see): URIs are unique "
        "across the catalog; choose another"
    )


class _Unchanged(Exception):
    """Internal: a save equals the newest version; carries that version's view."""

    def __init__(self, view: EntryView) -> None:
        super().__init__(view.name)
        self.view = view


class _BaseMoved(Exception):
    """Internal: another save landed between a merge patch's read and its write."""


def validation_errors(exc: ValidationError) -> list[dict[str, Any]]:
    errors = []
    for err in exc.errors():
        item = {"loc": ".".join(str(p) for p in err["loc"]), "msg": err["msg"].removeprefix("Value error, ")}
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, LimitExceeded):
            item["limit"] = env_name(cause.limit)
        errors.append(item)
    return errors


class CatalogService:
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
        self.url_guard = url_guard
        #: Field sizes and counts every write is checked against (and the MCP layer's pattern caps).
        self.limits = limits
        #: Labels no save moves (by default only those protected through the API).
        self.protection = protection or ProtectionPolicy(db, (), 1)
        #: Recent uses per entry, for lists in usage order (``registry.catalog.browse``).
        self.usage_ranking = browse.UsageRanking(db)
        self._usage_lists = browse.OrderedNames()
        self._listeners: list[Callable[[int], None]] = []

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

    # ----------------------------------------------------------------- validation
    def parse_spec(self, kind: str, raw: Mapping[str, Any]) -> Spec:
        """Validate a definition (shape, JSON Schemas, templates, outbound URLs); 422 on any problem."""
        if kind not in KINDS:
            raise NotFound(f"unknown kind {kind!r}")
        try:
            spec = SPEC_MODELS[kind].model_validate(dict(raw), context={"limits": self.limits})
        except ValidationError as exc:
            errors = validation_errors(exc)
            summary = "; ".join(f"{e['loc'] or kind}: {e['msg']}" for e in errors[:5])
            raise Invalid(f"invalid {kind}: {summary}", errors=errors) from None
        try:
            if isinstance(spec, PromptSpec):
                check_prompt_templates(spec, limits=self.limits)
            elif isinstance(spec, ResourceSpec):
                check_resource_templates(spec, limits=self.limits)
        except TemplateError as exc:
            raise Invalid(f"invalid {kind} template: {exc}") from None
        self._check_urls(spec)
        return spec

    def _check_note(self, note: str | None) -> None:
        cap = self.limits.change_note_chars
        if note is not None and len(note) > cap:
            refusal = LimitExceeded("change_note_chars", f"change_note has {len(note)} characters; at most {cap}")
            raise Invalid(
                str(refusal), errors=[{"loc": "change_note", "msg": str(refusal), "limit": env_name(refusal.limit)}]
            )

    def _check_urls(self, spec: Spec) -> None:
        if self.url_guard is None:
            return
        url: str | None = None
        if isinstance(spec, ToolSpec):
            url = spec.webhook.url
        elif isinstance(spec, ResourceSpec) and spec.kind == "http":
            url = spec.url
        if url:
            try:
                self.url_guard(url)
            except ValueError as exc:
                raise Invalid(f"refused outbound URL: {exc}") from None

    def _seal(self, spec: Spec, previous: Mapping[str, Any] | None) -> dict[str, Any]:
        """The stored form: write-only values encrypted, masked values carried over from ``previous``.

        A masked value (``********``) means "keep what is stored", and is only accepted while the
        URL those values are sent to keeps its origin (scheme, host and port): otherwise anyone
        allowed to edit could point the stored credentials at a host of their own and read them
        off the next call (then publish the version to a fresh label nobody watches).
        """
        stored = dump_spec(spec)
        kind = "tool" if isinstance(spec, ToolSpec) else "resource" if isinstance(spec, ResourceSpec) else ""
        holder = self._secret_holder(kind, stored)
        if holder is not None:
            old = self._secret_holder(kind, previous or {}) or {}
            self._seal_holder(holder, old, "webhook" if kind == "tool" else "resource")
        return stored

    def _seal_holder(self, holder: dict[str, Any], old: Mapping[str, Any], what: str) -> None:
        """Encrypt ``holder``'s ``headers`` (and ``secret``) in place, masked ones taken from ``old``."""
        headers: Mapping[str, str] = holder.get("headers") or {}
        masked = [f"header {name!r}" for name, value in headers.items() if value == MASK]
        if holder.get("secret") == MASK:
            masked.append("the secret")
        if masked and old.get("url") and self._origin(holder.get("url")) != self._origin(old.get("url")):
            raise Invalid(
                f"the {what} URL moves to another origin (scheme, host or port) than the stored one, so its "
                f"write-only values must be sent again: {', '.join(masked)} (masked values are only kept "
                "for the same origin)"
            )
        old_headers: Mapping[str, str] = old.get("headers") or {}
        sealed: dict[str, str] = {}
        for header, value in headers.items():
            if value == MASK:
                if header not in old_headers:
                    raise Invalid(f"{what} header {header!r} is masked but has no stored value to keep")
                sealed[header] = old_headers[header]
            else:
                sealed[header] = self.secrets.encrypt(value)
        if "headers" in holder:
            holder["headers"] = sealed
        if holder.get("secret") == MASK:
            if not old.get("secret"):
                raise Invalid(f"{what} secret is masked but there is no stored secret to keep")
            holder["secret"] = old["secret"]
        elif holder.get("secret"):
            holder["secret"] = self.secrets.encrypt(holder["secret"])

    @staticmethod
    def _secret_holder(kind: str, spec: Mapping[str, Any]) -> Any:
        """The part of a spec holding write-only values (``headers``, ``secret``) next to the ``url``
        they are sent to: a tool's webhook, an http resource itself; None for everything else."""
        if kind == "tool":
            return spec.get("webhook")
        if kind == "resource" and spec.get("headers"):
            return spec
        return None

    @staticmethod
    def _origin(url: Any) -> tuple[str, str, int | None] | None:
        """(scheme, host, port) of a URL, normalised (case, IDNA, default ports) and parsed the way
        the outbound client parses it, so no URL trick can look same-origin here and go elsewhere."""
        if not isinstance(url, str):
            return None
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, TypeError, ValueError):
            return None
        scheme = parsed.scheme.lower()
        port = parsed.port or {"http": 80, "https": 443}.get(scheme)
        return scheme, parsed.raw_host.decode("ascii", "replace").lower(), port

    @staticmethod
    def mask(kind: str, stored: Mapping[str, Any]) -> dict[str, Any]:
        spec = json.loads(json.dumps(stored))
        holder = CatalogService._secret_holder(kind, spec)
        if holder is not None:
            holder["headers"] = {k: MASK for k in holder.get("headers") or {}}
            if holder.get("secret"):
                holder["secret"] = MASK
        return spec

    def reveal(self, kind: str, stored: Mapping[str, Any]) -> dict[str, Any]:
        """The stored definition with write-only values decrypted (for calling webhooks and
        fetching http resources, never for display)."""
        spec = json.loads(json.dumps(stored))
        holder = self._secret_holder(kind, spec)
        if holder is not None:
            holder["headers"] = {k: self.secrets.decrypt(v) for k, v in (holder.get("headers") or {}).items()}
            if holder.get("secret"):
                holder["secret"] = self.secrets.decrypt(holder["secret"])
        return spec

    # ----------------------------------------------------------------- helpers
    @staticmethod
    def _lock_entry(session: Session, kind: str, name: str) -> Entry | None:
        stmt = select(Entry).where(Entry.kind == kind, Entry.name == name).with_for_update()
        return session.scalar(stmt)

    def _require(
        self,
        session: Session,
        kind: str,
        name: str,
        *,
        lock: bool = False,
        access: Access | None = None,
        role: str | None = None,
    ) -> Entry:
        """The entry, seen by ``access`` (and with ``role`` on its team when given): one hidden
        from ``access`` answers exactly like a missing one (``registry.catalog.access``)."""
        if kind not in KINDS:
            raise NotFound(f"unknown kind {kind!r}")
        if lock:
            entry = self._lock_entry(session, kind, name)
        else:
            entry = session.scalar(select(Entry).where(Entry.kind == kind, Entry.name == name))
        missing = Subject(kind=kind, name=name, missing="entry")
        if entry is None:
            raise NotFound(f"{kind} {name!r} does not exist", about=missing)
        # A hidden one answers as a missing one does: the same words, pointing the same way.
        if role is not None:
            check_may(access, role, entry.team, f"{kind} {name!r}", about=missing)
        else:
            check_sees(access, entry.team, f"{kind} {name!r}", about=missing)
        return entry

    @staticmethod
    def _version(session: Session, entry: Entry, number: int) -> EntryVersion:
        version = session.scalar(
            select(EntryVersion).where(EntryVersion.entry_id == entry.id, EntryVersion.number == number)
        )
        if version is None:
            raise NotFound(
                f"{entry.kind} {entry.name!r} has no version {number} (its newest is v{entry.latest_version})",
                about=Subject(kind=entry.kind, name=entry.name, version=number, missing="version"),
            )
        return version

    def _view(self, entry: Entry, version: EntryVersion) -> EntryView:
        return EntryView(
            kind=entry.kind,
            name=entry.name,
            version=version.number,
            latest_version=entry.latest_version,
            spec=self.mask(entry.kind, version.spec),
            labels={label.name: label.version for label in entry.labels},
            archived=entry.archived,
            author=version.author,
            change_note=version.change_note,
            created_at=entry.created_at,
            updated_at=entry.updated_at,
            team=entry.team,
            saved_at=version.created_at,
        )

    @staticmethod
    def _check_labels(labels: Iterable[str]) -> list[str]:
        result = []
        for label in labels:
            if not is_label(label):
                raise Invalid(f"invalid label {label!r}: use 1-64 of [a-z0-9_.-], starting with a letter or digit")
            if label == LATEST:
                raise Invalid("the 'latest' label moves by itself and cannot be set")
            result.append(label)
        return result

    @staticmethod
    def _denormalize(entry: Entry, spec: Spec) -> None:
        entry.title = spec.title
        entry.description = spec.description
        entry.tags = "," + ",".join(spec.tags) + ("," if spec.tags else "")
        if isinstance(spec, ResourceSpec):
            entry.uri = spec.identity_uri

    def _check_uri_free(self, session: Session, spec: Spec, entry_id: int | None, access: Access | None = None) -> None:
        if not isinstance(spec, ResourceSpec):
            return
        other = session.scalar(select(Entry).where(Entry.kind == "resource", Entry.uri == spec.identity_uri))
        if other is not None and other.id != entry_id:
            if access is not None and not access.sees(other.team):  # URIs are unique: say so, not whose
                raise Conflict(uri_taken(spec.identity_uri))
            raise Conflict(f"resource {other.name!r} already uses {spec.identity_uri!r}")

    @staticmethod
    def _move_labels(session: Session, entry: Entry, labels: Iterable[str], version: int) -> list[str]:
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

    def _served_specs(
        self,
        session: Session,
        entry: Entry,
        labels: Iterable[str],
        known: Mapping[int, Mapping[str, Any]] | None = None,
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
                    specs[label.version] = self._version(session, entry, label.version).spec
                served[label.name] = specs[label.version]
        return served

    @staticmethod
    def _listing_changed(
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

    @staticmethod
    def _uris(kind: str, *specs: Mapping[str, Any] | None) -> list[str]:
        if kind != "resource":
            return []
        return sorted({s.get("uri") or s.get("uriTemplate") or "" for s in specs if s} - {""})

    # ----------------------------------------------------------------- protected labels
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
        """Open a change request per held label (``held``: label -> approvals it needs) that does
        not already serve ``to_version``, in the save's own transaction; none unless asked."""
        if review is None or not held:
            return []
        title, description = check_request_text(review.title, review.description, self.limits)
        current = {label.name: label.version for label in entry.labels}
        opened = []
        for label in sorted(held):
            if current.get(label) == to_version:
                continue
            pending = pending_request(session, entry.kind, entry.name, label, to_version)
            if pending is not None:
                opened.append(pending)
                continue
            request = open_request(
                session,
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

    def _protected_move(
        self,
        session: Session,
        entry: Entry,
        label: str,
        actor: Actor | str,
        access: Access | None,
        override_reason: str | None,
    ) -> Actor:
        """Who moves ``label`` of ``entry`` directly (a label move or removal, not a save): as
        given for an unprotected label; for a protected one only an admin's emergency override
        with a reason, recorded as such (``override=True``). Forbidden otherwise."""
        who = as_actor(actor)
        if label not in self.protection.protected_in(session, [label]):
            return who.with_reason(override_reason.strip()) if override_reason and override_reason.strip() else who
        if override_reason is None or not override_reason.strip():
            raise Forbidden(
                f"label {label!r} is protected: open a change request to move it (POST /api/v1/change-requests; "
                "reviewers approve it), or, as an admin in an emergency, give an override_reason"
            )
        reason = check_reason(override_reason, "an emergency override of a protected label", self.limits)
        if access is not None and not access.may("admin", entry.team):
            raise Forbidden(
                f"moving the protected label {label!r} without a change request is an emergency override: "
                "only an admin may make one"
            )
        return who.with_reason(reason, override=True)

    def lock_entry(self, session: Session, kind: str, name: str, *, access: Access | None = None) -> Entry:
        """The entry, locked for the rest of ``session``'s transaction and seen by ``access``
        (a change request's publication moves its label under this lock)."""
        return self._require(session, kind, name, lock=True, access=access)

    # ----------------------------------------------------------------- writes
    def create(
        self,
        kind: str,
        raw: Mapping[str, Any],
        *,
        actor: Actor | str,
        note: str | None = None,
        labels: list[str] | None = None,
        team: str | None = None,
        access: Access | None = None,
        review: ReviewAsk | None = None,
    ) -> WriteResult:
        """A new entry, owned by ``team`` (None: global); ``access`` needs editor on it. A team
        ``access`` does not belong to answers like one that does not exist.

        Protected labels among ``labels`` (default ``production``) are not given to it: they come
        back as ``held``, with a change request each (``change_requests``) when ``review`` asks."""
        self._check_note(note)
        if team is not None:
            check_team_name(team)
        check_may(access, "editor", team, f"team {team!r}" if team is not None else f"a global {kind}")
        spec = self.parse_spec(kind, raw)
        target_labels = self._check_labels(labels if labels else [PRODUCTION])
        with _unique_violations_as_conflict(kind, spec), self.db.session() as session:
            if team is not None:
                require_team(session, team, lock=True)  # held against a concurrent delete of the team
            existing = session.scalar(select(Entry).where(Entry.kind == kind, Entry.name == spec.name))
            if existing is not None:
                if access is not None and not access.sees(existing.team):
                    raise Conflict(name_taken(kind, spec.name))  # taken, not whose (nor archived or not)
                hint = " (archived: restore it instead)" if existing.archived else ""
                raise Conflict(f"{kind} {spec.name!r} already exists{hint}", about=Subject(kind=kind, name=spec.name))
            self._check_uri_free(session, spec, None, access)
            stored = self._seal(spec, None)
            now = utcnow()
            entry = Entry(
                kind=kind, name=spec.name, latest_version=1, archived=False, created_at=now, updated_at=now, team=team
            )
            self._denormalize(entry, spec)
            entry.versions.append(
                EntryVersion(number=1, spec=stored, author=as_actor(actor).name, change_note=note, created_at=now)
            )
            session.add(entry)
            session.flush()
            held = self.protection.protected_in(session, target_labels)
            moved = self._move_labels(session, entry, [LATEST, *(lb for lb in target_labels if lb not in held)], 1)
            change = append_change(
                session,
                kind=kind,
                name=spec.name,
                action="created",
                version=1,
                labels=moved,
                uris=self._uris(kind, stored),
                actor=actor,
                team=entry.team,
                note=note,
                listing_changed=moved,  # a new entry appears in every label it is given
                digest=versions_digest(kind, spec.name, [(1, stored)]),
            )
            session.flush()
            opened = self._open_held(session, entry, held, 1, actor=actor, review=review)
            view = self._view(entry, entry.versions[0])
            change_id = change.id
        self._committed(change_id)
        return WriteResult(view, change_id, held=sorted(held), change_requests=opened)

    def update(
        self,
        kind: str,
        name: str,
        raw: Mapping[str, Any],
        *,
        actor: Actor | str,
        if_match: str | None = None,
        note: str | None = None,
        labels: list[str] | None = None,
        access: Access | None = None,
        review: ReviewAsk | None = None,
        secrets_from: int | None = None,
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
        condition = parse_if_match(if_match) if if_match is not None else None  # 400 before any work
        try:
            return self._save_version(
                kind,
                name,
                raw,
                actor=actor,
                condition=condition,
                note=note,
                labels=labels,
                access=access,
                review=review,
                secrets_from=secrets_from,
            )
        except _Unchanged as unchanged:
            return self._unchanged_save(kind, name, unchanged.view, labels, actor=actor, access=access, review=review)

    def restore_version(
        self,
        kind: str,
        name: str,
        number: int,
        *,
        actor: Actor | str,
        if_match: str | None = None,
        note: str | None = None,
        access: Access | None = None,
    ) -> WriteResult:
        """Save version ``number``'s definition again, as the entry's new version ("Restore v6").

        The new version is a copy of the stored one, write-only values included (as that version
        had them, not the newest). Only ``latest`` moves to it: publishing it is a label move of its
        own (reviewed, for a protected label), so a restore never changes what agents are served.
        The note defaults to "Restore vN". It is a save like any other: checked against today's
        rules (an old version may fail them: 422), refused for an archived entry, held to
        ``If-Match``; restoring what the newest version already says writes nothing.
        """
        condition = parse_if_match(if_match) if if_match is not None else None
        with self.db.session() as session:
            entry = self._require(session, kind, name, access=access, role="editor")
            source = self._version(session, entry, number)
            stored = json.loads(json.dumps(source.spec))
        try:
            return self._save_version(
                kind,
                name,
                self.mask(kind, stored),
                actor=actor,
                condition=condition,
                note=note if note is not None else f"Restore v{number}",
                labels=None,
                access=access,
                sealed=stored,
                default_labels=(),
            )
        except _Unchanged as unchanged:
            return WriteResult(unchanged.view, None, changed=False)

    def patch(
        self,
        kind: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        actor: Actor | str,
        if_match: str | None = None,
        note: str | None = None,
        labels: list[str] | None = None,
        access: Access | None = None,
        review: ReviewAsk | None = None,
    ) -> WriteResult:
        """Apply a JSON Merge Patch (RFC 7396) to the newest version and save the result.

        The patch applies to the entry as the API shows it: write-only values are ``********``
        there, and left so they keep their stored values (as long as the URL keeps its origin).
        ``template`` replaces ``messages`` (its shorthand). The read and the save are tied by the
        version they saw: a save that lands in between makes the patch re-apply to the new
        version (or answer 412 when ``If-Match`` names the old one), so no edit is lost.
        """
        condition = parse_if_match(if_match) if if_match is not None else None
        if "name" in patch:
            raise Invalid("a merge patch cannot contain 'name': the URL names the entry, and entries are not renamed")
        for _attempt in range(self.PATCH_ATTEMPTS):
            with self.db.session() as session:
                entry = self._require(session, kind, name, access=access, role="editor")
                base = entry.latest_version
                current = self.mask(kind, self._version(session, entry, base).spec)
            # The result is validated (422) before If-Match is weighed (412), as for a full save.
            if patch.get("template") is not None and "messages" not in patch:
                current.pop("messages", None)  # the shorthand replaces the messages
            merged = merge_patch(current, patch)
            try:
                return self._save_version(
                    kind,
                    name,
                    merged,
                    actor=actor,
                    condition=condition,
                    note=note,
                    labels=labels,
                    base_version=base,
                    access=access,
                    review=review,
                )
            except _Unchanged as unchanged:
                return self._unchanged_save(
                    kind, name, unchanged.view, labels, actor=actor, access=access, review=review
                )
            except _BaseMoved:
                continue
        raise PreconditionFailed(f"{kind} {name!r} keeps changing while the patch is applied; retry")

    #: How often a merge patch is re-applied when other saves keep landing between its read and its write.
    PATCH_ATTEMPTS = 3

    def _unchanged_save(
        self,
        kind: str,
        name: str,
        view: EntryView,
        labels: list[str] | None,
        *,
        actor: Actor | str,
        access: Access | None = None,
        review: ReviewAsk | None = None,
    ) -> WriteResult:
        change_id = None
        wanted = [label for label in self._check_labels(labels or []) if view.labels.get(label) != view.version]
        if not wanted:
            return WriteResult(view, change_id, changed=False)
        with self.db.session() as session:
            held = self.protection.protected_in(session, wanted)
        for label in wanted:
            if label not in held:
                moved = self.set_label(kind, name, label, view.version, actor=actor, access=access)
                view, change_id = moved.view, moved.change_id or change_id
        opened: list[int] = []
        if held and review is not None:
            with self.db.session() as session:
                entry = self._require(session, kind, name, lock=True, access=access, role="editor")
                opened = self._open_held(session, entry, held, view.version, actor=actor, review=review)
        return WriteResult(view, change_id, changed=False, held=sorted(held), change_requests=opened)

    def _same_content(self, kind: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        """Whether two stored specs say the same; encrypted values are compared decrypted (each
        encryption of a value differs)."""
        return old == new or self.reveal(kind, old) == self.reveal(kind, new)

    def _save_version(
        self,
        kind: str,
        name: str,
        raw: Mapping[str, Any],
        *,
        actor: Actor | str,
        condition: IfMatch | None,
        note: str | None,
        labels: list[str] | None,
        base_version: int | None = None,
        access: Access | None = None,
        review: ReviewAsk | None = None,
        secrets_from: int | None = None,
        sealed: Mapping[str, Any] | None = None,
        default_labels: tuple[str, ...] = (PRODUCTION,),
    ) -> WriteResult:
        """One new version. ``sealed``: the stored form to save as is (a restore: already sealed);
        else ``raw`` is sealed here, masked values taken from ``secrets_from`` (default the newest).
        ``default_labels``: what the version is published to when ``labels`` names none."""
        self._check_note(note)
        raw = dict(raw)
        if raw.setdefault("name", name) != name:
            raise Invalid(f"the body names {raw['name']!r} but the URL names {name!r}; entries cannot be renamed")
        spec = self.parse_spec(kind, raw)
        target_labels = self._check_labels(labels if labels else list(default_labels))
        with _unique_violations_as_conflict(kind, spec, updating=True), self.db.session() as session:
            entry = self._require(session, kind, name, lock=True, access=access, role="editor")
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
            self._check_uri_free(session, spec, entry.id, access)
            current = self._version(session, entry, base)
            previous = current.spec
            if sealed is not None:
                stored = json.loads(json.dumps(sealed))
            else:
                kept = previous if secrets_from in (None, base) else self._version(session, entry, secrets_from).spec
                stored = self._seal(spec, kept)
            if self._same_content(kind, previous, stored):
                raise _Unchanged(self._view(entry, current))  # rolls back: nothing was written
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
            self._denormalize(entry, spec)
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
            served_before = self._served_specs(session, entry, moving, {base: previous})
            moved = self._move_labels(session, entry, moving, number)
            change = append_change(
                session,
                kind=kind,
                name=name,
                action="updated",
                version=number,
                labels=moved,
                uris=self._uris(kind, previous, stored),
                actor=actor,
                team=entry.team,
                note=note,
                listing_changed=self._listing_changed(kind, entry, moved, served_before, stored),
                digest=versions_digest(kind, name, [(number, stored)]),
            )
            session.flush()
            opened = self._open_held(session, entry, held, number, actor=actor, review=review)
            view = self._view(entry, version)
            change_id = change.id
        self._committed(change_id)
        return WriteResult(view, change_id, held=sorted(held), change_requests=opened)

    def set_label(
        self,
        kind: str,
        name: str,
        label: str,
        version: int,
        *,
        actor: Actor | str,
        access: Access | None = None,
        override_reason: str | None = None,
    ) -> WriteResult:
        """Point ``label`` at ``version``. A protected label is moved by a change request
        (``registry.catalog.reviews``), or here only as an admin's emergency override: with
        ``override_reason``, recorded in the change row (``override``, ``reason``)."""
        (label,) = self._check_labels([label])
        with self.db.session() as session:
            entry = self._require(session, kind, name, lock=True, access=access, role="editor")
            target = self._version(session, entry, version)
            if any(lb.name == label and lb.version == version for lb in entry.labels):
                moved_by = as_actor(actor)  # nothing moves: no protection to weigh
            else:
                moved_by = self._protected_move(session, entry, label, actor, access, override_reason)
            change_id = self.move_label_in(session, entry, label, target, actor=moved_by)
            view = self._view(entry, self._version(session, entry, entry.latest_version))
        self._committed(change_id)
        return WriteResult(view, change_id, changed=change_id is not None)

    def move_label_in(
        self,
        session: Session,
        entry: Entry,
        label: str,
        target: EntryVersion,
        *,
        actor: Actor | str,
        note: str | None = None,
    ) -> int | None:
        """Point ``label`` of ``entry`` (locked by the caller) at ``target`` inside ``session``,
        with its ``label_moved`` change row (``note`` added to the row's own); the change id, None
        when it already pointed there. Protection is the caller's to weigh. The caller tells the
        listeners (``committed``) once its transaction has committed."""
        old = next((lb.version for lb in entry.labels if lb.name == label), None)
        moved = self._move_labels(session, entry, [label], target.number)
        if not moved:
            return None
        old_spec = self._version(session, entry, old).spec if old is not None else None
        summary = f"{label}: {old if old is not None else '-'} -> {target.number}"
        change = append_change(
            session,
            kind=entry.kind,
            name=entry.name,
            action="label_moved",
            version=target.number,
            labels=moved,
            uris=self._uris(entry.kind, old_spec, target.spec),
            actor=actor,
            team=entry.team,
            note=f"{summary} ({note})" if note else summary,
            listing_changed=self._listing_changed(entry.kind, entry, moved, {label: old_spec}, target.spec),
            digest=versions_digest(entry.kind, entry.name, [(target.number, target.spec)]),
        )
        session.flush()
        return change.id

    def version_in(self, session: Session, entry: Entry, number: int) -> EntryVersion:
        """One version of ``entry``, read in ``session`` (404 when it has no such version)."""
        return self._version(session, entry, number)

    def delete_label(
        self,
        kind: str,
        name: str,
        label: str,
        *,
        actor: Actor | str,
        access: Access | None = None,
        override_reason: str | None = None,
    ) -> WriteResult:
        """Remove ``label``; a protected one only as an admin's emergency override (``override_reason``)."""
        if label == LATEST:
            raise Invalid("the 'latest' label cannot be removed")
        with self.db.session() as session:
            entry = self._require(session, kind, name, lock=True, access=access, role="editor")
            existing = next((lb for lb in entry.labels if lb.name == label), None)
            if existing is None:
                raise NotFound(
                    f"{kind} {name!r} has no label {label!r}",
                    about=Subject(kind=kind, name=name, label=label, missing="label"),
                )
            actor = self._protected_move(session, entry, label, actor, access, override_reason)
            old_spec = self._version(session, entry, existing.version).spec
            entry.labels.remove(existing)
            change = append_change(
                session,
                kind=kind,
                name=name,
                action="label_deleted",
                version=existing.version,
                labels=[label],
                uris=self._uris(kind, old_spec),
                actor=actor,
                team=entry.team,
                listing_changed=self._listing_changed(kind, entry, [label], {label: old_spec}, None),
            )
            session.flush()
            view = self._view(entry, self._version(session, entry, entry.latest_version))
            change_id = change.id
        self._committed(change_id)
        return WriteResult(view, change_id)

    def set_archived(
        self, kind: str, name: str, archived: bool, *, actor: Actor | str, access: Access | None = None
    ) -> WriteResult:
        with self.db.session() as session:
            entry = self._require(session, kind, name, lock=True, access=access, role="editor")
            change_id = None
            if entry.archived != archived:
                entry.archived = archived
                entry.updated_at = utcnow()
                specs = [self._version(session, entry, lb.version).spec for lb in entry.labels]
                change = append_change(
                    session,
                    kind=kind,
                    name=name,
                    action="archived" if archived else "restored",
                    version=entry.latest_version,
                    labels=[lb.name for lb in entry.labels],
                    uris=self._uris(kind, *specs),
                    actor=actor,
                    team=entry.team,
                    listing_changed=[lb.name for lb in entry.labels],  # it leaves or rejoins every list
                )
                session.flush()
                change_id = change.id
            view = self._view(entry, self._version(session, entry, entry.latest_version))
        self._committed(change_id)
        return WriteResult(view, change_id, changed=change_id is not None)

    def set_team(
        self, kind: str, name: str, team: str | None, *, actor: Actor | str, access: Access | None = None
    ) -> WriteResult:
        """Move an entry to ``team`` (None: make it global). ``access`` needs editor on both the
        old and the new team. Who sees it changes, so the change row names every label (each
        label's listing changes for someone) and both audiences, the old and the new."""
        if team is not None:
            check_team_name(team)
        with self.db.session() as session:
            entry = self._require(session, kind, name, lock=True, access=access, role="editor")
            check_may(access, "editor", team, f"team {team!r}" if team is not None else "global entries")
            if team is not None:
                require_team(session, team, lock=True)
            old = entry.team
            change_id = None
            if old != team:
                entry.team = team
                entry.updated_at = utcnow()
                labels = [lb.name for lb in entry.labels]
                specs = [self._version(session, entry, lb.version).spec for lb in entry.labels]
                change = append_change(
                    session,
                    kind=kind,
                    name=name,
                    action="team_moved",
                    version=entry.latest_version,
                    labels=labels,
                    uris=self._uris(kind, *specs),
                    actor=actor,
                    team=team,
                    audience=[old or "*", team or "*"],
                    note=f"team: {old or '-'} -> {team or '-'}",
                    listing_changed=[] if entry.archived else labels,  # it leaves one audience's lists, joins another's
                )
                session.flush()
                change_id = change.id
            view = self._view(entry, self._version(session, entry, entry.latest_version))
        self._committed(change_id)
        return WriteResult(view, change_id, changed=change_id is not None)

    # ----------------------------------------------------------------- reads
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
            entry = self._require(session, kind, name, access=access)
            if label is not None:
                found = next((lb.version for lb in entry.labels if lb.name == label), None)
                if found is None:
                    raise NotFound(
                        f"{kind} {name!r} has no label {label!r}",
                        about=Subject(kind=kind, name=name, label=label, missing="label"),
                    )
                version = found
            return self._view(entry, self._version(session, entry, version or entry.latest_version))

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
            entry = self._require(session, kind, name, access=access)
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
            entry = self._require(session, kind, name, access=access)
            old = self.mask(kind, self._version(session, entry, from_version).spec)
            new = self.mask(kind, self._version(session, entry, to_version).spec)
        sections: dict[str, str] = {}
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                old_text, new_text = field_text(old.get(key)), field_text(new.get(key))
                if old_text == new_text:  # they differ in a final newline only: show both as JSON strings
                    old_text, new_text = json.dumps(old.get(key)) + "\n", json.dumps(new.get(key)) + "\n"
                sections[key] = _unified_text(old_text, new_text, f"v{from_version}/{key}", f"v{to_version}/{key}")
        return {
            "kind": kind,
            "name": name,
            "from": from_version,
            "to": to_version,
            "changed": sorted(sections),
            "fields": sections,
            "diff": _unified(old, new, f"{name}@v{from_version}", f"{name}@v{to_version}"),
        }

    def render_prompt(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        version: int | None = None,
        label: str | None = None,
        access: Access | None = None,
    ) -> dict[str, Any]:
        """A preview: the GetPromptResult agents get, plus the ``version`` rendered and the ``label``
        it was picked by. Without either, the ``production`` label's version (what agents are
        served); ``version`` previews any version, ``label`` another label's."""
        if version is not None and label is not None:
            raise Invalid("give 'version' or 'label', not both")
        if version is None and label is None:
            label = PRODUCTION
        try:
            view = self.get("prompt", name, version=version, label=label, access=access)
        except NotFound as exc:
            if label == PRODUCTION and version is None and "no label" in exc.detail:
                raise NotFound(
                    f"prompt {name!r} has no {PRODUCTION!r} label, so agents are not served it; preview a "
                    "version or another label ('version' or 'label')"
                ) from None
            raise
        spec = PromptSpec.model_validate(view.spec)
        resolve_label = label or PRODUCTION
        try:
            result = PromptRenderer(spec).render(
                arguments,
                lambda uri: self.read_resource(uri, label=resolve_label, access=access),
                limits=self.limits,
            )
        except (ArgumentError, TemplateError) as exc:
            raise Invalid(str(exc)) from None
        return {**result, "version": view.version, "label": label}

    def tool_to_call(
        self, name: str, *, version: int | None = None, label: str | None = None, access: Access | None = None
    ) -> tuple[int, str | None, dict[str, Any]]:
        """(version, label, definition with write-only values decrypted) of the tool a test call
        runs: by default the ``production`` label's version, which is what agents call. A test
        call sends the tool's secrets to its webhook: ``access`` needs editor on its team."""
        if version is not None and label is not None:
            raise Invalid("give 'version' or 'label', not both")
        if version is None and label is None:
            label = PRODUCTION
        with self.db.session() as session:
            entry = self._require(session, "tool", name, access=access, role="editor")
            if label is not None:
                found = next((lb.version for lb in entry.labels if lb.name == label), None)
                if found is None:
                    raise NotFound(f"tool {name!r} has no label {label!r}")
                version = found
            assert version is not None
            stored = self._version(session, entry, version).spec
        return version, label, self.reveal("tool", stored)

    def read_resource(
        self, uri: str, *, label: str = PRODUCTION, access: Access | None = None
    ) -> list[dict[str, Any]] | None:
        """Contents of a static or template resource as ``label`` serves it (None when nothing
        matches); only resources ``access`` sees are read."""
        with self.db.session() as session:
            rows = session.execute(
                select(Entry, EntryVersion)
                .join(Label, (Label.entry_id == Entry.id) & (Label.name == label))
                .join(EntryVersion, (EntryVersion.entry_id == Entry.id) & (EntryVersion.number == Label.version))
                .where(Entry.kind == "resource", Entry.archived.is_(False), *visible_entries(access))
            ).all()
        specs = [ResourceSpec.model_validate(v.spec) for _e, v in rows]
        for spec in sorted(specs, key=lambda s: s.kind == "template"):  # exact URIs win over templates
            if spec.kind == "http":
                continue
            contents = ResourceRenderer(spec).read(uri, limits=self.limits)
            if contents is not None:
                return contents
        return None

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

    def prompts_embedding(
        self, resources: Iterable[Mapping[str, Any]], *, label: str, access: Access | None = None
    ) -> list[str]:
        """Names of the live prompts ``label`` serves (those ``access`` sees) with a message that
        embeds one of the stored ``resources`` (for the pre-publish checks of a resource). Only
        prompts with an embedded resource at all are read and parsed."""
        wanted = [r for r in resources if r]
        if not wanted:
            return []
        with self.db.session() as session:
            rows = session.execute(
                select(Entry.name, EntryVersion.spec)
                .join(Label, (Label.entry_id == Entry.id) & (Label.name == label))
                .join(EntryVersion, (EntryVersion.entry_id == Entry.id) & (EntryVersion.number == Label.version))
                .where(
                    Entry.kind == "prompt",
                    Entry.archived.is_(False),
                    cast(EntryVersion.spec, Text).contains('"resource"'),
                    *visible_entries(access),
                )
                .order_by(Entry.name)
            ).all()
        return [name for name, spec in rows if embeds(spec, wanted)]

    def served_entries(self, label: str) -> list[tuple[str, str, int, dict[str, Any], str | None]]:
        """(kind, name, version, stored spec, team) of every live entry as ``label`` serves it."""
        with self.db.session() as session:
            rows = session.execute(
                select(Entry.kind, Entry.name, EntryVersion.number, EntryVersion.spec, Entry.team)
                .join(Label, (Label.entry_id == Entry.id) & (Label.name == label))
                .join(EntryVersion, (EntryVersion.entry_id == Entry.id) & (EntryVersion.number == Label.version))
                .where(Entry.archived.is_(False))
                .order_by(Entry.kind, Entry.name)
            ).all()
        return [(k, n, v, s, t) for k, n, v, s, t in rows]

    #: Entries named per query by ``served_rows_of`` (bound parameters stay far below any limit).
    SERVED_ROWS_CHUNK = 1000

    def served_rows(self, label: str) -> tuple[int, list[tuple[str, str, int, str, str | None]]]:
        """What a served snapshot of ``label`` is built from: the id of the last change, then
        (kind, name, version, stored spec as JSON text, team) of every live entry the label serves
        (the team: who may see it over MCP; None for a global entry).

        The id is read first, in the same transaction, so the rows reflect at least every change
        up to it (later ones are applied on top). The spec comes as text: the snapshot keeps the
        text and parses a definition only when it is used, a fraction of the memory of parsed
        documents at 100,000 entries (and no JSON decoding inside the transaction)."""
        with self.db.session() as session:
            position = last_change_id(session)
            rows = session.execute(
                select(Entry.kind, Entry.name, EntryVersion.number, cast(EntryVersion.spec, Text), Entry.team)
                .join(Label, (Label.entry_id == Entry.id) & (Label.name == label))
                .join(EntryVersion, (EntryVersion.entry_id == Entry.id) & (EntryVersion.number == Label.version))
                .where(Entry.archived.is_(False))
            ).all()
        return position, [(kind, name, number, spec, team) for kind, name, number, spec, team in rows]

    def served_rows_of(
        self, labels: Iterable[str], entries: Iterable[tuple[str, str]]
    ) -> list[tuple[str, str, str, int, str, str | None]]:
        """(kind, name, label, version, stored spec as JSON text, team) of the named (kind, name) entries
        as each of ``labels`` serves them; a combination with no row is one the label does not
        serve (no such label on it, or archived). What applying a batch of changes to the served
        snapshots reads: indexed lookups of the changed entries only, one query per
        ``SERVED_ROWS_CHUNK`` of them, whatever the size of the catalog."""
        label_names = sorted(set(labels))
        by_kind: dict[str, set[str]] = {}
        for kind, name in entries:
            by_kind.setdefault(kind, set()).add(name)
        chunks: list[tuple[str, list[str]]] = []
        for kind, names in sorted(by_kind.items()):
            ordered = sorted(names)
            for start in range(0, len(ordered), self.SERVED_ROWS_CHUNK):
                chunks.append((kind, ordered[start : start + self.SERVED_ROWS_CHUNK]))
        if not label_names or not chunks:
            return []
        found: list[tuple[str, str, str, int, str, str | None]] = []
        with self.db.session() as session:
            for kind, chunk in chunks:
                rows = session.execute(
                    select(
                        Entry.kind,
                        Entry.name,
                        Label.name,
                        EntryVersion.number,
                        cast(EntryVersion.spec, Text),
                        Entry.team,
                    )
                    .join(Label, (Label.entry_id == Entry.id) & Label.name.in_(label_names))
                    .join(EntryVersion, (EntryVersion.entry_id == Entry.id) & (EntryVersion.number == Label.version))
                    .where(Entry.kind == kind, Entry.name.in_(chunk), Entry.archived.is_(False))
                ).all()
                found.extend((k, n, label, number, spec, team) for k, n, label, number, spec, team in rows)
        return found

    def seal(self, kind: str, spec: Mapping[str, Any], previous: Mapping[str, Any] | None) -> dict[str, Any]:
        """The stored form of a canonical definition (``dump_spec`` output), as ``_seal`` makes it of
        a parsed one: write-only values encrypted, masked ones kept from ``previous`` (same rules)."""
        if self._secret_holder(kind, spec) is None:
            return dict(spec)
        stored = json.loads(json.dumps(spec))
        old = self._secret_holder(kind, previous or {}) or {}
        self._seal_holder(self._secret_holder(kind, stored), old, "webhook" if kind == "tool" else "resource")
        return stored


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


class _BlockDumper(yaml.SafeDumper):
    """YAML that keeps multi-line templates readable (literal blocks) for diffs and bundles."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_BlockDumper.add_representer(str, _str_representer)


def to_yaml(value: Any) -> str:
    return yaml.dump(value, Dumper=_BlockDumper, sort_keys=False, allow_unicode=True, width=100)


def _unified(old: Any, new: Any, from_name: str, to_name: str) -> str:
    old_text = "" if old is None else to_yaml(old)
    new_text = "" if new is None else to_yaml(new)
    return _unified_text(old_text, new_text, from_name, to_name)


def field_text(value: Any) -> str:
    """One field as a reader compares it: text as itself (a template line by line), objects and
    lists as YAML, other scalars as JSON; never YAML's ``...`` document end marker, which a bare
    scalar would get."""
    if value is None:
        return ""
    if isinstance(value, str):
        text = value
    elif isinstance(value, dict | list):
        text = to_yaml(value)
    else:
        text = json.dumps(value)
    return text if text.endswith("\n") or not text else text + "\n"


def _unified_text(old_text: str, new_text: str, from_name: str, to_name: str) -> str:
    return "".join(
        difflib.unified_diff(
            old_text.splitlines(keepends=True), new_text.splitlines(keepends=True), fromfile=from_name, tofile=to_name
        )
    )
