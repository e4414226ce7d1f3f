"""Appending to and reading the change log.

PostgreSQL hands out sequence values at INSERT time, not at COMMIT time, so two concurrent
writers could commit ids out of order and a reader asking for "after N" would miss one. Every
append therefore first takes a transaction-scoped advisory lock: change-log appends (and so
their ids) are serialised in commit order. Writes are admin edits, so the lock is never hot.
The same transaction queues a ``NOTIFY`` carrying the new id; PostgreSQL delivers it only if
the transaction commits, which is what replicas listen for.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from registry.db.models import Change

#: Arbitrary constant identifying the change-log lock among advisory locks.
CHANGELOG_LOCK_KEY = 0x4D4350_5245  # "MCP" "RE"
NOTIFY_CHANNEL = "registry_changes"


def append_change(
    session: Session,
    *,
    kind: str,
    name: str,
    action: str,
    actor: str,
    labels: Sequence[str],
    version: int | None = None,
    uris: Sequence[str] = (),
    note: str | None = None,
    listing_changed: Sequence[str] | None = None,
) -> Change:
    """Append one change. ``listing_changed``: the labels whose MCP lists this change alters
    (see ``Change.listing_changed``); None when the writer did not work it out, which readers
    take as all of ``labels`` (a list_changed too many is harmless, one too few is not)."""
    is_postgres = session.get_bind().dialect.name == "postgresql"
    if is_postgres:
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": CHANGELOG_LOCK_KEY})
    change = Change(
        kind=kind,
        name=name,
        action=action,
        version=version,
        labels=sorted(set(labels)),
        uris=sorted(set(uris)),
        actor=actor,
        note=note,
        listing_changed=None if listing_changed is None else sorted(set(listing_changed) & set(labels)),
    )
    session.add(change)
    session.flush()
    if is_postgres:
        session.execute(
            text("SELECT pg_notify(:channel, :payload)"), {"channel": NOTIFY_CHANNEL, "payload": str(change.id)}
        )
    return change


def changes_after(session: Session, after: int, limit: int = 1000) -> list[Change]:
    stmt = select(Change).where(Change.id > after).order_by(Change.id).limit(limit)
    return list(session.scalars(stmt))


def last_change_id(session: Session) -> int:
    stmt = select(Change.id).order_by(Change.id.desc()).limit(1)
    return session.scalar(stmt) or 0
