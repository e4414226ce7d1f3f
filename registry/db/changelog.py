"""Appending to and reading the change log.

PostgreSQL hands out sequence values at INSERT time, not at COMMIT time, so two concurrent
writers could commit ids out of order and a reader asking for "after N" would miss one. Every
append therefore first takes a transaction-scoped advisory lock: change-log appends (and so
their ids) are serialised in commit order. Writes are admin edits, so the lock is never hot.
The same transaction queues a ``NOTIFY`` carrying the new id; PostgreSQL delivers it only if
the transaction commits, which is what replicas listen for.

Under the same lock each row is chained to the one before it with the database's audit key
(``registry.db.audit``): the change log doubles as the tamper-evident audit trail.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from registry.db.audit import Actor, as_actor, chain
from registry.db.engine import AUDIT_KEY_INFO
from registry.db.models import Change, utcnow

#: Arbitrary constant identifying the change-log lock among advisory locks.
CHANGELOG_LOCK_KEY = 0x4D4350_5245  # "MCP" "RE"
NOTIFY_CHANNEL = "registry_changes"
#: The kinds of a catalog change (an entry's); governance events (``append_event``) have other
#: kinds and name no labels.
CATALOG_KINDS = ("prompt", "resource", "tool")


def append_change(
    session: Session,
    *,
    kind: str,
    name: str,
    action: str,
    actor: Actor | str,
    labels: Sequence[str],
    version: int | None = None,
    uris: Sequence[str] = (),
    note: str | None = None,
    listing_changed: Sequence[str] | None = None,
    team: str | None = None,
    audience: Sequence[str] | None = None,
    digest: str | None = None,
    ref: str | None = None,
) -> Change:
    """Append one change. ``digest``: of what the change made (``registry.db.audit``); ``ref``:
    what a governance event is about. ``listing_changed``: the labels whose MCP lists this change alters
    (see ``Change.listing_changed``); None when the writer did not work it out, which readers
    take as all of ``labels`` (a list_changed too many is harmless, one too few is not).
    ``team``: the entry's team after the change; ``audience``: whose view it alters (team
    names, ``*`` for everyone); by default the entry's team, or everyone for a global entry."""
    is_postgres = session.get_bind().dialect.name == "postgresql"
    if is_postgres:
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": CHANGELOG_LOCK_KEY})
    who = as_actor(actor)
    row = audit_row(
        kind=kind,
        name=name,
        action=action,
        version=version,
        labels=sorted(set(labels)),
        uris=sorted(set(uris)),
        actor=who,
        note=note,
        listing_changed=None if listing_changed is None else sorted(set(listing_changed) & set(labels)),
        team=team,
        audience=audience,
        digest=digest,
        ref=ref,
    )
    chain([row], last_hash(session), chain_key(session))
    change = Change(**row)
    session.add(change)
    session.flush()
    if is_postgres:
        session.execute(
            text("SELECT pg_notify(:channel, :payload)"), {"channel": NOTIFY_CHANNEL, "payload": str(change.id)}
        )
    return change


def append_event(
    session: Session,
    *,
    kind: str,
    name: str,
    action: str,
    actor: Actor | str,
    team: str | None = None,
    note: str | None = None,
    version: int | None = None,
    digest: str | None = None,
    ref: str | None = None,
) -> Change:
    """Append a governance event (a change request reviewed, a team created, a label protected,
    a token issued) to the change log, so it is part of the hash-chained audit trail. It names no
    labels, so no agent's view changes and nothing is sent to agents. ``kind`` is not a catalog
    kind (``change_request``, ``team``, ``label``, ``token``); consumers of the change log skip
    rows whose ``labels`` are empty."""
    return append_change(
        session,
        kind=kind,
        name=name,
        action=action,
        actor=actor,
        labels=(),
        version=version,
        note=note,
        listing_changed=(),
        team=team,
        audience=(),
        digest=digest,
        ref=ref,
    )


def chain_key(session: Session) -> bytes:
    """The audit key of the database ``session`` belongs to; refused when it has none (a row
    chained without the key would be one anybody could forge)."""
    key = session.info.get(AUDIT_KEY_INFO)
    if not key:
        raise RuntimeError("this database was opened without an audit key: the change log cannot be appended to")
    return bytes(key)


def audit_row(
    *,
    kind: str,
    name: str,
    action: str,
    actor: Actor | str,
    labels: Sequence[str] = (),
    version: int | None = None,
    uris: Sequence[str] = (),
    note: str | None = None,
    listing_changed: Sequence[str] | None = None,
    team: str | None = None,
    audience: Sequence[str] | None = None,
    created_at: datetime | None = None,
    digest: str | None = None,
    ref: str | None = None,
) -> dict[str, Any]:
    """The column values of one change row, before it is chained (bulk writers build many)."""
    who = as_actor(actor)
    return {
        "created_at": created_at or utcnow(),
        "kind": kind,
        "name": name,
        "action": action,
        "version": version,
        "labels": list(labels),
        "uris": list(uris),
        "listing_changed": None if listing_changed is None else list(listing_changed),
        "actor": who.name[:128],
        "note": note,
        "team": team,
        "audience": sorted(set(audience)) if audience is not None else [team or "*"],
        "token_id": who.token_id,
        "user": who.user,
        "reason": who.reason,
        "override": who.override,
        "digest": digest,
        "ref": ref,
    }


def last_hash(session: Session) -> str:
    """The newest change row's hash ("" for an empty log); read under the append lock."""
    return session.scalar(select(Change.hash).order_by(Change.id.desc()).limit(1)) or ""


def changes_after(session: Session, after: int, limit: int = 1000) -> list[Change]:
    stmt = select(Change).where(Change.id > after).order_by(Change.id).limit(limit)
    return list(session.scalars(stmt))


def last_change_id(session: Session) -> int:
    stmt = select(Change.id).order_by(Change.id.desc()).limit(1)
    return session.scalar(stmt) or 0
