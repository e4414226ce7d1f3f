"""Protected labels: which labels no save moves, and the change requests a held move opens.

A protected label (``production``, typically) is where agents are served from, so moving it is
a decision of more than one person: a save that would move it leaves it where it is ("held")
and may open a change request instead, which reviewers other than its author approve
(``registry.catalog.reviews``). An admin can still move it at once with a reason (an emergency
override, marked in the audit trail).

Protection is catalog state: the ``protected_labels`` table, which every writer reads (the API,
the web UI, ``mcp-registry import``, a start-up seed, stdio), whatever its own environment says.
Admins protect labels through the API or the web UI; ``REGISTRY_PROTECTED_LABELS`` *adds* to the
table when a process prepares its database (``record_settings``: rows with source
``environment``), and also protects its labels within that process. The variable only adds:
dropping a label from it unprotects nothing (a process started without it obeys the table all the
same); an admin unprotects a label through the API or the web UI, recorded in the audit trail, once
no process's variable names it any more. ``latest`` moves by itself with every save and can never
be protected.

The policy is read inside the writer's own transaction (``protected_in``), so a save and a
concurrent "protect production" cannot interleave into a half-protected state.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.catalog.access import Access, check_may
from registry.catalog.errors import Conflict, Invalid, NotFound
from registry.catalog.specs import is_label
from registry.db.audit import (
    REQUEST_FIELDS,
    REVIEW_FIELDS,
    Actor,
    as_actor,
    label_ref,
    protection_digest,
    request_ref,
)
from registry.db.audit import request_digest as digest_of_request
from registry.db.changelog import append_event
from registry.db.engine import Database
from registry.db.models import ChangeRequest, ChangeRequestReview, ProtectedLabel, utcnow
from registry.limits import DEFAULT_LIMITS, LimitExceeded, Limits

LATEST = "latest"
#: The setting that adds protected labels (the API cannot unprotect one it names).
SETTING = "REGISTRY_PROTECTED_LABELS"
#: Who the audit trail names for the rows ``SETTING`` writes.
SETTING_ACTOR = "environment"
#: Most approvals a protected label may demand (a bound on input, not a policy).
MAX_APPROVALS = 10
#: Longest change request title the table holds (``REGISTRY_LIMIT_TITLE_CHARS`` when lower).
TITLE_CHARS = 256
#: Change request states, and those still open (a later save may open another for the same label).
STATES = ("draft", "in_review", "approved", "rejected", "published", "withdrawn")
OPEN_STATES = ("draft", "in_review", "approved", "rejected")


@dataclass(frozen=True)
class ReviewAsk:
    """What a save asks for when it holds a protected label: a change request per held label,
    with this title and description (both optional)."""

    title: str | None = None
    description: str | None = None
    #: Publish each request as soon as the approvals it needs are in (the author's choice).
    publish_when_approved: bool = False


def check_reason(reason: str | None, what: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """A non-empty reason of at most ``change_note_chars`` characters (overrides need one)."""
    text = (reason or "").strip()
    if not text:
        raise Invalid(f"{what} needs a reason: say why (it is recorded in the audit trail)")
    cap = limits.change_note_chars
    if len(text) > cap:
        raise Invalid(str(LimitExceeded("change_note_chars", f"the reason has {len(text)} characters; at most {cap}")))
    return text


def check_request_text(title: str | None, description: str | None, limits: Limits) -> tuple[str | None, str | None]:
    """A change request's title and description, bounded like an entry's."""
    title = (title or "").strip() or None
    description = (description or "").strip() or None
    title_cap = min(limits.title_chars, TITLE_CHARS)
    if title is not None and len(title) > title_cap:
        message = f"the change request title has {len(title)} characters; at most {title_cap}"
        raise Invalid(str(LimitExceeded("title_chars", message)))
    if title is not None and any(ord(c) < 32 or ord(c) == 127 for c in title):
        raise Invalid("the change request title must be one line without control characters")
    if description is not None and len(description) > limits.description_chars:
        cap = limits.description_chars
        message = f"the change request description has {len(description)} characters; at most {cap}"
        raise Invalid(str(LimitExceeded("description_chars", message)))
    return title, description


class ProtectionPolicy:
    """Which labels are protected and how many approvals moving each needs."""

    def __init__(self, db: Database, settings_labels: Iterable[str], default_approvals: int) -> None:
        labels = tuple(dict.fromkeys(label.strip() for label in settings_labels if label.strip()))
        for label in labels:
            if label == LATEST:
                raise ValueError(f"{SETTING} names 'latest', which moves with every save and cannot be protected")
            if not is_label(label):
                raise ValueError(f"{SETTING} names {label!r}, which is not a label (1-64 of a-z 0-9 _ . -)")
        if not 1 <= default_approvals <= MAX_APPROVALS:
            raise ValueError(f"REGISTRY_REQUIRED_APPROVALS must be 1-{MAX_APPROVALS}, got {default_approvals}")
        self.db = db
        #: From the environment: always protected, whatever the table says.
        self.settings_labels = frozenset(labels)
        self.default_approvals = default_approvals
        self._hint: tuple[float, frozenset[str]] = (0.0, frozenset())
        self._hint_lock = threading.Lock()

    # ------------------------------------------------------------------ reading
    def protected_in(self, session: Session, labels: Iterable[str] | None = None) -> dict[str, int]:
        """label -> approvals needed, for the protected ones of ``labels`` (all when None), read in
        ``session`` (a writer's transaction). One indexed query; none when nothing can be protected
        but the environment's."""
        wanted = None if labels is None else {label for label in labels if label != LATEST}
        found = {label: self.default_approvals for label in self.settings_labels if wanted is None or label in wanted}
        if wanted is not None and not wanted:
            return found
        stmt = select(ProtectedLabel)
        if wanted is not None:
            stmt = stmt.where(ProtectedLabel.name.in_(sorted(wanted)))
        for row in session.scalars(stmt):
            found[row.name] = row.approvals or self.default_approvals
        return found

    #: How long ``names_hint`` trusts what it read (seconds).
    HINT_TTL_S = 5.0

    def names_hint(self) -> frozenset[str]:
        """The protected labels' names, read at most every ``HINT_TTL_S`` seconds: for what pages
        say ahead of a save (the editor's "production is protected"), never for a decision (saves
        read the table in their own transaction). Cheap enough to ask while rendering."""
        now = time.monotonic()
        read_at, names = self._hint
        if now - read_at < self.HINT_TTL_S:
            return names
        with self._hint_lock:
            read_at, names = self._hint
            if now - read_at >= self.HINT_TTL_S:
                with self.db.session() as session:
                    names = self.settings_labels | set(session.scalars(select(ProtectedLabel.name)))
                self._hint = (time.monotonic(), frozenset(names))
            return self._hint[1]

    def _forget_hint(self) -> None:
        self._hint = (0.0, frozenset())

    def protected(self, label: str) -> bool:
        with self.db.session() as session:
            return label in self.protected_in(session, [label])

    def approvals(self, label: str) -> int:
        """Approvals a change request to ``label`` needs (the default when it is not protected)."""
        with self.db.session() as session:
            return self.protected_in(session, [label]).get(label, self.default_approvals)

    def list_labels(self) -> list[dict[str, Any]]:
        """Every protected label: ``source`` says whether the environment or the API protects it."""
        with self.db.session() as session:
            rows = {row.name: row for row in session.scalars(select(ProtectedLabel))}
        items = []
        for name in sorted(self.settings_labels | set(rows)):
            row = rows.get(name)
            items.append(
                {
                    "name": name,
                    "approvals": (row.approvals if row is not None and row.approvals else self.default_approvals),
                    # Who protected it: the variable (this process's, or written by one at start-up) or an admin.
                    "source": row.source if row is not None else "environment",
                    "created_by": row.created_by if row is not None else None,
                    "created_at": _iso(row.created_at) if row is not None else None,
                }
            )
        return items

    def get(self, label: str) -> dict[str, Any]:
        found = next((item for item in self.list_labels() if item["name"] == label), None)
        if found is None:
            raise NotFound(f"label {label!r} is not protected")
        return found

    # ------------------------------------------------------------------ changing
    def record_settings(self) -> list[str]:
        """Write this process's ``REGISTRY_PROTECTED_LABELS`` into the table (source
        ``environment``), so processes started without the variable obey it too; the labels
        added. A label already protected stays as it is, except that it is made to need at least
        ``REGISTRY_REQUIRED_APPROVALS`` approvals (the variables only tighten: lowering goes
        through the API). Each change is a ``label_protected`` / ``label_protection_changed``
        event in the audit trail. Called where a process prepares its database."""
        if not self.settings_labels:
            return []
        added: list[str] = []
        needed = self.default_approvals
        with self.db.session() as session:
            for label in sorted(self.settings_labels):
                row = session.get(ProtectedLabel, label, with_for_update=True)
                if row is None:
                    session.add(
                        ProtectedLabel(
                            name=label,
                            approvals=needed,
                            created_by=SETTING_ACTOR,
                            created_at=utcnow(),
                            source="environment",
                        )
                    )
                    session.flush()  # a concurrent start-up writing the same row fails here, not at commit
                    action, added = "label_protected", [*added, label]
                elif (row.approvals or 1) < needed:
                    row.approvals = needed
                    action = "label_protection_changed"
                else:
                    continue
                note = f"{label} protected by {SETTING}: {needed} approval{'s' if needed != 1 else ''} needed"
                protection_event(session, label, action, needed, actor=SETTING_ACTOR, note=note)
        self._forget_hint()
        return added

    def protect(
        self, label: str, approvals: int | None, *, actor: Actor | str, access: Access | None = None
    ) -> dict[str, Any]:
        """Protect ``label`` (or change how many approvals it needs). Admins only."""
        check_may(access, "admin", None, "protected labels")
        self._check_label(label)
        if approvals is not None and not 1 <= approvals <= MAX_APPROVALS:
            raise Invalid(f"approvals must be 1-{MAX_APPROVALS}, got {approvals}")
        with self.db.session() as session:
            row = session.get(ProtectedLabel, label, with_for_update=True)
            if row is None:
                who = as_actor(actor).name
                session.add(ProtectedLabel(name=label, approvals=approvals, created_by=who, created_at=utcnow()))
                action = "label_protected"
            elif row.approvals != approvals:
                row.approvals = approvals
                action = "label_protection_changed"
            else:
                action = ""
            if action:
                needed = approvals or self.default_approvals
                note = f"{label} protected: {needed} approval{'s' if needed != 1 else ''} needed to move it"
                protection_event(session, label, action, approvals, actor=actor, note=note)
        self._forget_hint()
        return self.get(label)

    def unprotect(self, label: str, *, actor: Actor | str, access: Access | None = None) -> None:
        """Unprotect ``label`` (an admin; audit-logged), whoever protected it, unless this
        process's ``REGISTRY_PROTECTED_LABELS`` still names it (its next start would protect it
        again: the variable only adds, so it is taken out of the variable first)."""
        check_may(access, "admin", None, "protected labels")
        self._check_label(label)
        if label in self.settings_labels:
            raise Conflict(
                f"label {label!r} is named by {SETTING}, which only adds protection: remove it from the variable "
                "on every process (and restart them), then unprotect it here"
            )
        with self.db.session() as session:
            row = session.get(ProtectedLabel, label, with_for_update=True)
            if row is None:
                raise NotFound(f"label {label!r} is not protected")
            session.delete(row)
            append_event(
                session,
                kind="label",
                name=label,
                action="label_unprotected",
                actor=actor,
                note=f"{label} unprotected",
                ref=label_ref(label),
            )
        self._forget_hint()

    @staticmethod
    def _check_label(label: str) -> None:
        if label == LATEST:
            raise Invalid("the 'latest' label moves with every save and cannot be protected")
        if not is_label(label):
            raise Invalid(f"invalid label {label!r}: use 1-64 of [a-z0-9_.-], starting with a letter or digit")


def protection_event(
    session: Session, label: str, action: str, approvals: int | None, *, actor: Actor | str, note: str
) -> None:
    """Append a governance event that leaves ``label`` protected, needing ``approvals`` (None:
    the default): its digest is what ``registry.catalog.audit_verify`` checks the table against."""
    append_event(
        session,
        kind="label",
        name=label,
        action=action,
        actor=actor,
        note=note,
        digest=protection_digest(label, approvals),
        ref=label_ref(label),
    )


def open_request(
    session: Session,
    *,
    kind: str,
    name: str,
    team: str | None,
    label: str,
    from_version: int | None,
    to_version: int,
    actor: Actor | str,
    approvals_required: int,
    title: str | None = None,
    description: str | None = None,
    state: str = "in_review",
    publish_when_approved: bool = False,
) -> ChangeRequest:
    """Insert a change request (and its ``cr_opened`` audit event) in the caller's transaction:
    the save that holds a label and the request to move it commit together, or neither does."""
    who = as_actor(actor)
    now = utcnow()
    request = ChangeRequest(
        kind=kind,
        name=name,
        team=team,
        label=label,
        from_version=from_version,
        to_version=to_version,
        state=state,
        title=title or f"{kind} {name}: {label} {_v(from_version)} → v{to_version}",
        description=description,
        author=who.name[:128],
        author_key=who.key[:300],
        approvals_required=approvals_required,
        publish_when_approved=publish_when_approved,
        created_at=now,
        updated_at=now,
    )
    session.add(request)
    session.flush()
    append_event(
        session,
        kind="change_request",
        name=f"{kind}/{name}"[:128],  # the change log's name column; the note names the request
        action="cr_opened",
        actor=who,
        team=team,
        version=to_version,
        note=f"change request #{request.id} ({kind} {name}): {label} {_v(from_version)} -> v{to_version} ({state})"
        + ("; to be published when approved" if publish_when_approved else ""),
        digest=request_digest(session, request.id),
        ref=request_ref(request.id),
    )
    return request


_REQUESTS = ChangeRequest.__table__
_REVIEWS = ChangeRequestReview.__table__


def request_digest(session: Session, request_id: int) -> str:
    """The digest an event about change request ``request_id`` records: the request and its
    reviews as they stand in ``session`` now (read as rows, not through the identity map, so a
    compare-and-swap ``UPDATE`` just made is seen)."""
    request = session.execute(
        select(*(_REQUESTS.c[f] for f in REQUEST_FIELDS)).where(_REQUESTS.c.id == request_id)
    ).one()
    reviews = session.execute(
        select(*(_REVIEWS.c[f] for f in REVIEW_FIELDS)).where(_REVIEWS.c.request_id == request_id)
    ).all()
    return digest_of_request(dict(request._mapping), [dict(review._mapping) for review in reviews])


def pending_request(session: Session, kind: str, name: str, label: str, to_version: int) -> int | None:
    """The id of a request still awaiting review or publication that asks the same move (a
    second identical save asks nothing new), else None."""
    stmt = (
        select(ChangeRequest.id)
        .where(
            ChangeRequest.kind == kind,
            ChangeRequest.name == name,
            ChangeRequest.label == label,
            ChangeRequest.to_version == to_version,
            ChangeRequest.state.in_(("draft", "in_review", "approved")),
        )
        .order_by(ChangeRequest.id)
        .limit(1)
    )
    found: int | None = session.scalar(stmt)
    return found


def _v(version: int | None) -> str:
    return f"v{version}" if version is not None else "(unset)"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
