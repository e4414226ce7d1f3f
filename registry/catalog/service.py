"""The catalog service: the one place that reads and writes prompts, resources and tools.

The REST API, the web UI, the CLI importer and the MCP layer all go through this class; routers
stay thin. Every write happens in one transaction that also appends to the change log, and
after it commits the ``on_change`` callbacks learn the new change id (the in-process signal;
PostgreSQL replicas learn it through NOTIFY, queued inside the same transaction).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
import yaml
from pydantic import ValidationError
from sqlalchemy import func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from registry.catalog.errors import Conflict, Invalid, NotFound, PreconditionFailed
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
from registry.catalog.templates import TemplateError
from registry.db.changelog import append_change, changes_after
from registry.db.engine import Database
from registry.db.models import Change, Entry, EntryVersion, Label, utcnow
from registry.limits import DEFAULT_LIMITS, LimitExceeded, Limits, env_name

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
            "author": self.author,
            "change_note": self.change_note,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "spec": self.spec,
        }


@dataclass(frozen=True)
class ImportPlanItem:
    kind: str
    name: str
    action: str  # create | update | unchanged | restore+update
    source: str = ""


@dataclass
class Page:
    items: list[dict[str, Any]]
    total: int
    limit: int
    offset: int


@dataclass(frozen=True)
class WriteResult:
    view: EntryView
    change_id: int | None = None
    changed: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


def make_etag(version: int) -> str:
    return f'"v{version}"'


def etag_matches(if_match: str, current_version: int) -> bool:
    if if_match.strip() == "*":
        return True
    wanted = make_etag(current_version)
    candidates = [c.strip().removeprefix("W/") for c in if_match.split(",")]
    return wanted in candidates


@contextmanager
def _unique_violations_as_conflict(kind: str, spec: Spec, *, updating: bool = False) -> Iterator[None]:
    """A concurrent writer committed the same name, resource URI or version number after our checks:
    the database's unique constraints refuse the second write, which is a 409/412, not a 500."""
    try:
        yield
    except IntegrityError as exc:
        message = str(exc.orig)
        if isinstance(spec, ResourceSpec) and ("uq_entries_uri" in message or "entries.uri" in message):
            raise Conflict(f"another resource already uses {spec.identity_uri!r}") from None
        if updating:
            raise PreconditionFailed(
                f"{kind} {spec.name!r} was changed concurrently; reload and re-apply your edit"
            ) from None
        raise Conflict(f"{kind} {spec.name!r} already exists") from None


def _validation_errors(exc: ValidationError) -> list[dict[str, Any]]:
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
    ) -> None:
        self.db = db
        self.secrets = secrets
        self.url_guard = url_guard
        #: Field sizes and counts every write is checked against (and the MCP layer's pattern caps).
        self.limits = limits
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

    # ----------------------------------------------------------------- validation
    def parse_spec(self, kind: str, raw: Mapping[str, Any]) -> Spec:
        """Validate a definition (shape, JSON Schemas, templates, outbound URLs); 422 on any problem."""
        if kind not in KINDS:
            raise NotFound(f"unknown kind {kind!r}")
        try:
            spec = SPEC_MODELS[kind].model_validate(dict(raw), context={"limits": self.limits})
        except ValidationError as exc:
            errors = _validation_errors(exc)
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

    def _require(self, session: Session, kind: str, name: str, *, lock: bool = False) -> Entry:
        if kind not in KINDS:
            raise NotFound(f"unknown kind {kind!r}")
        if lock:
            entry = self._lock_entry(session, kind, name)
        else:
            entry = session.scalar(select(Entry).where(Entry.kind == kind, Entry.name == name))
        if entry is None:
            raise NotFound(f"{kind} {name!r} does not exist")
        return entry

    @staticmethod
    def _version(session: Session, entry: Entry, number: int) -> EntryVersion:
        version = session.scalar(
            select(EntryVersion).where(EntryVersion.entry_id == entry.id, EntryVersion.number == number)
        )
        if version is None:
            raise NotFound(f"{entry.kind} {entry.name!r} has no version {number}")
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

    def _check_uri_free(self, session: Session, spec: Spec, entry_id: int | None) -> None:
        if not isinstance(spec, ResourceSpec):
            return
        other = session.scalar(select(Entry).where(Entry.kind == "resource", Entry.uri == spec.identity_uri))
        if other is not None and other.id != entry_id:
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

    @staticmethod
    def _uris(kind: str, *specs: Mapping[str, Any] | None) -> list[str]:
        if kind != "resource":
            return []
        return sorted({s.get("uri") or s.get("uriTemplate") or "" for s in specs if s} - {""})

    # ----------------------------------------------------------------- writes
    def create(
        self,
        kind: str,
        raw: Mapping[str, Any],
        *,
        actor: str,
        note: str | None = None,
        labels: list[str] | None = None,
    ) -> WriteResult:
        self._check_note(note)
        spec = self.parse_spec(kind, raw)
        target_labels = self._check_labels(labels if labels else [PRODUCTION])
        with _unique_violations_as_conflict(kind, spec), self.db.session() as session:
            existing = session.scalar(select(Entry).where(Entry.kind == kind, Entry.name == spec.name))
            if existing is not None:
                hint = " (archived: restore it instead)" if existing.archived else ""
                raise Conflict(f"{kind} {spec.name!r} already exists{hint}")
            self._check_uri_free(session, spec, None)
            stored = self._seal(spec, None)
            now = utcnow()
            entry = Entry(kind=kind, name=spec.name, latest_version=1, archived=False, created_at=now, updated_at=now)
            self._denormalize(entry, spec)
            entry.versions.append(EntryVersion(number=1, spec=stored, author=actor, change_note=note, created_at=now))
            session.add(entry)
            session.flush()
            moved = self._move_labels(session, entry, [LATEST, *target_labels], 1)
            change = append_change(
                session,
                kind=kind,
                name=spec.name,
                action="created",
                version=1,
                labels=moved,
                uris=self._uris(kind, stored),
                actor=actor,
                note=note,
            )
            session.flush()
            view = self._view(entry, entry.versions[0])
            change_id = change.id
        self._committed(change_id)
        return WriteResult(view, change_id)

    def update(
        self,
        kind: str,
        name: str,
        raw: Mapping[str, Any],
        *,
        actor: str,
        if_match: str | None = None,
        note: str | None = None,
        labels: list[str] | None = None,
    ) -> WriteResult:
        self._check_note(note)
        raw = dict(raw)
        if raw.setdefault("name", name) != name:
            raise Invalid(f"the body names {raw['name']!r} but the URL names {name!r}; entries cannot be renamed")
        spec = self.parse_spec(kind, raw)
        target_labels = self._check_labels(labels if labels else [PRODUCTION])
        with _unique_violations_as_conflict(kind, spec, updating=True), self.db.session() as session:
            entry = self._require(session, kind, name, lock=True)
            if entry.archived:
                raise Conflict(f"{kind} {name!r} is archived; restore it before editing")
            base = entry.latest_version
            if if_match is not None and not etag_matches(if_match, base):
                raise PreconditionFailed(
                    f"{kind} {name!r} changed since you read it (now version {base}); reload and re-apply your edit"
                )
            self._check_uri_free(session, spec, entry.id)
            previous = self._version(session, entry, base).spec
            stored = self._seal(spec, previous)
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
                entry_id=entry.id, number=number, spec=stored, author=actor, change_note=note, created_at=now
            )
            session.add(version)
            moved = self._move_labels(session, entry, [LATEST, *target_labels], number)
            change = append_change(
                session,
                kind=kind,
                name=name,
                action="updated",
                version=number,
                labels=moved,
                uris=self._uris(kind, previous, stored),
                actor=actor,
                note=note,
            )
            session.flush()
            view = self._view(entry, version)
            change_id = change.id
        self._committed(change_id)
        return WriteResult(view, change_id)

    def set_label(self, kind: str, name: str, label: str, version: int, *, actor: str) -> WriteResult:
        (label,) = self._check_labels([label])
        with self.db.session() as session:
            entry = self._require(session, kind, name, lock=True)
            target = self._version(session, entry, version)
            old = next((lb.version for lb in entry.labels if lb.name == label), None)
            moved = self._move_labels(session, entry, [label], version)
            change_id = None
            if moved:
                old_spec = self._version(session, entry, old).spec if old is not None else None
                change = append_change(
                    session,
                    kind=kind,
                    name=name,
                    action="label_moved",
                    version=version,
                    labels=moved,
                    uris=self._uris(kind, old_spec, target.spec),
                    actor=actor,
                    note=f"{label}: {old if old is not None else '-'} -> {version}",
                )
                session.flush()
                change_id = change.id
            view = self._view(entry, self._version(session, entry, entry.latest_version))
        self._committed(change_id)
        return WriteResult(view, change_id, changed=bool(moved))

    def delete_label(self, kind: str, name: str, label: str, *, actor: str) -> WriteResult:
        if label == LATEST:
            raise Invalid("the 'latest' label cannot be removed")
        with self.db.session() as session:
            entry = self._require(session, kind, name, lock=True)
            existing = next((lb for lb in entry.labels if lb.name == label), None)
            if existing is None:
                raise NotFound(f"{kind} {name!r} has no label {label!r}")
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
            )
            session.flush()
            view = self._view(entry, self._version(session, entry, entry.latest_version))
            change_id = change.id
        self._committed(change_id)
        return WriteResult(view, change_id)

    def set_archived(self, kind: str, name: str, archived: bool, *, actor: str) -> WriteResult:
        with self.db.session() as session:
            entry = self._require(session, kind, name, lock=True)
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
                )
                session.flush()
                change_id = change.id
            view = self._view(entry, self._version(session, entry, entry.latest_version))
        self._committed(change_id)
        return WriteResult(view, change_id, changed=change_id is not None)

    # ----------------------------------------------------------------- reads
    def get(self, kind: str, name: str, *, version: int | None = None, label: str | None = None) -> EntryView:
        with self.db.session() as session:
            entry = self._require(session, kind, name)
            if label is not None:
                found = next((lb.version for lb in entry.labels if lb.name == label), None)
                if found is None:
                    raise NotFound(f"{kind} {name!r} has no label {label!r}")
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
    ) -> Page:
        if kind not in KINDS:
            raise NotFound(f"unknown kind {kind!r}")
        limit = max(1, min(limit, 500))
        offset = max(0, offset)
        stmt = select(Entry).where(Entry.kind == kind, Entry.archived == archived)
        if tag:
            stmt = stmt.where(Entry.tags.contains(f",{tag},", autoescape=True))
        if q:
            # A plain substring search: LIKE wildcards (% and _) in ``q`` match themselves.
            needle = q.lower()
            stmt = stmt.where(
                or_(
                    func.lower(Entry.name).contains(needle, autoescape=True),
                    func.lower(func.coalesce(Entry.title, "")).contains(needle, autoescape=True),
                    func.lower(func.coalesce(Entry.description, "")).contains(needle, autoescape=True),
                )
            )
        with self.db.session() as session:
            total = session.scalar(select(func.count()).select_from(stmt.subquery())) or 0
            rows = session.scalars(stmt.order_by(Entry.name).limit(limit).offset(offset)).all()
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
                    "updated_at": e.updated_at.isoformat(),
                }
                for e in rows
            ]
        return Page(items=items, total=total, limit=limit, offset=offset)

    def versions(self, kind: str, name: str) -> list[dict[str, Any]]:
        with self.db.session() as session:
            entry = self._require(session, kind, name)
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

    def diff(self, kind: str, name: str, from_version: int, to_version: int) -> dict[str, Any]:
        with self.db.session() as session:
            entry = self._require(session, kind, name)
            old = self.mask(kind, self._version(session, entry, from_version).spec)
            new = self.mask(kind, self._version(session, entry, to_version).spec)
        sections: dict[str, str] = {}
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                sections[key] = _unified(old.get(key), new.get(key), f"v{from_version}/{key}", f"v{to_version}/{key}")
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
    ) -> dict[str, Any]:
        view = self.get("prompt", name, version=version, label=label)
        spec = PromptSpec.model_validate(view.spec)
        resolve_label = label or PRODUCTION
        try:
            return PromptRenderer(spec).render(
                arguments, lambda uri: self.read_resource(uri, label=resolve_label), limits=self.limits
            )
        except (ArgumentError, TemplateError) as exc:
            raise Invalid(str(exc)) from None

    def read_resource(self, uri: str, *, label: str = PRODUCTION) -> list[dict[str, Any]] | None:
        """Contents of a static or template resource as ``label`` serves it (None when nothing matches)."""
        with self.db.session() as session:
            rows = session.execute(
                select(Entry, EntryVersion)
                .join(Label, (Label.entry_id == Entry.id) & (Label.name == label))
                .join(EntryVersion, (EntryVersion.entry_id == Entry.id) & (EntryVersion.number == Label.version))
                .where(Entry.kind == "resource", Entry.archived.is_(False))
            ).all()
        specs = [ResourceSpec.model_validate(v.spec) for _e, v in rows]
        for spec in sorted(specs, key=lambda s: s.kind == "template"):  # exact URIs win over templates
            if spec.kind == "http":
                continue
            contents = ResourceRenderer(spec).read(uri, limits=self.limits)
            if contents is not None:
                return contents
        return None

    def changes(self, after: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        limit = max(1, min(limit, 1000))
        with self.db.session() as session:
            return [change_as_dict(c) for c in changes_after(session, after, limit)]

    def served_entries(self, label: str) -> list[tuple[str, str, int, dict[str, Any]]]:
        """(kind, name, version, stored spec) of every live entry as ``label`` serves it."""
        with self.db.session() as session:
            rows = session.execute(
                select(Entry.kind, Entry.name, EntryVersion.number, EntryVersion.spec)
                .join(Label, (Label.entry_id == Entry.id) & (Label.name == label))
                .join(EntryVersion, (EntryVersion.entry_id == Entry.id) & (EntryVersion.number == Label.version))
                .where(Entry.archived.is_(False))
                .order_by(Entry.kind, Entry.name)
            ).all()
        return [(k, n, v, s) for k, n, v, s in rows]

    def latest_stored(self, kind: str, name: str) -> tuple[Entry, dict[str, Any]] | None:
        with self.db.session() as session:
            entry = session.scalar(select(Entry).where(Entry.kind == kind, Entry.name == name))
            if entry is None:
                return None
            return entry, self._version(session, entry, entry.latest_version).spec


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
    }


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
    return "".join(
        difflib.unified_diff(
            old_text.splitlines(keepends=True), new_text.splitlines(keepends=True), fromfile=from_name, tofile=to_name
        )
    )
