"""The deliverer's database work: queueing events behind each subscription's cursor, picking what
is due, recording attempts.

**Queueing.** For each enabled subscription, the change-log rows after its ``cursor`` are read in
id order; those that are an event it wants become ``EventDelivery`` rows, and the cursor moves to
the last row read, in one transaction: after a crash either both happened or neither did, so no
event is skipped or queued twice (a unique (subscription, change) key holds that regardless).

**Order.** Per subscription, deliveries go strictly in change-log order, one at a time: the
oldest pending one is the only one sent, and until it is delivered (or given up as ``failed``)
the later ones wait. So a receiver sees each entry's events in order (and all of them in order).

**Recording.** An attempt's outcome is written only while the lease still names this process
with the epoch it sent under (``registry.events.lease``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, exists, select, update
from sqlalchemy.orm import Session, aliased

from registry.catalog.secrets import SecretBox, SecretKeyError
from registry.db.changelog import CATALOG_KINDS, changes_after
from registry.db.engine import Database
from registry.db.models import Change, ChangeRequest, EventDelivery, EventLease, EventSubscription, utcnow
from registry.limits import Limits

from .lease import LEASE_NAME, Held
from .types import (
    TOOL_TEST_KIND,
    Event,
    Filters,
    body,
    catalog_event,
    change_request_event,
    event_type,
    request_id_of,
    tool_test_event,
)

#: Change-log rows read per subscription per round.
QUEUE_BATCH = 500
#: Longest error text kept per delivery.
ERROR_CHARS = 500
#: The error recorded on a subscription's delivery when its URL or secret cannot be decrypted.
UNDECRYPTABLE = "cannot decrypt the signing secret: rotate it"
UNDECRYPTABLE_URL = "cannot decrypt the URL: set it again"
#: Delivered and failed deliveries are kept this long (the delivery log), then pruned.
KEEP_DAYS = 30


def webhook_id(subscription_id: int, change_id: int) -> str:
    """Stable per (subscription, event): retries and redeliveries carry the same id."""
    return f"msg_{subscription_id}_{change_id}"


def as_event(session: Session, row: Change) -> Event | None:
    """``row`` as an event, or None when it is none."""
    kind_of_event = event_type(row.kind, row.action)
    if kind_of_event is None:
        return None
    if row.kind in CATALOG_KINDS:
        return catalog_event(row, kind_of_event)
    if row.kind == "change_request":
        number = request_id_of(row)
        request = session.get(ChangeRequest, number) if number is not None else None
        return change_request_event(row, kind_of_event, request)
    if row.kind == TOOL_TEST_KIND:
        return tool_test_event(row, kind_of_event)
    return None


def queue_new(db: Database, limits: Limits) -> int:
    """Queue the events after each enabled subscription's cursor; how many were queued."""
    with db.session() as session:
        ids = list(session.scalars(select(EventSubscription.id).where(EventSubscription.enabled.is_(True))))
    queued = 0
    for subscription_id in ids:
        while True:
            added, more = _queue_one(db, subscription_id, limits)
            queued += added
            if not more:
                break
    return queued


def _queue_one(db: Database, subscription_id: int, limits: Limits) -> tuple[int, bool]:
    with db.session() as session:
        subscription = session.get(EventSubscription, subscription_id, with_for_update=True)
        if subscription is None or not subscription.enabled:
            return 0, False
        rows = changes_after(session, subscription.cursor, limit=QUEUE_BATCH)
        if not rows:
            return 0, False
        wanted = set(subscription.events)
        filters = Filters.from_json(subscription.filters)
        added = 0
        for row in rows:
            event = as_event(session, row)
            if event is None or event.type not in wanted or not filters.matches(event):
                continue
            session.add(
                EventDelivery(
                    subscription_id=subscription.id,
                    change_id=row.id,
                    webhook_id=webhook_id(subscription.id, row.id),
                    event_type=event.type,
                    body=body(event, with_text=subscription.slack_text, max_bytes=limits.event_payload_bytes),
                    status="pending",
                    attempts=0,
                    next_attempt_at=utcnow(),
                )
            )
            added += 1
        subscription.cursor = rows[-1].id
        return added, len(rows) == QUEUE_BATCH


@dataclass(frozen=True)
class Due:
    """One delivery to attempt now, with what sending it needs."""

    delivery_id: int
    subscription_id: int
    webhook_id: str
    url: str
    #: The secrets that sign it: the current one, and a rotated-out one still in its grace period.
    secrets: tuple[str, ...]
    body: str
    attempts: int
    #: Set: it cannot be sent (its subscription's secret or URL does not decrypt); recorded as a
    #: failed attempt with this error, so it backs off like any failure and the others go on.
    error: str | None = None


@dataclass(frozen=True)
class Waiting:
    """What is due now (one per subscription at most) and when the next one not yet due is."""

    due: list[Due]
    next_at: datetime | None


def due(db: Database, secrets: SecretBox, busy: set[int], now: datetime) -> Waiting:
    """Per enabled subscription not in ``busy``, its oldest pending delivery if it is due."""
    earlier = aliased(EventDelivery)
    with db.session() as session:
        oldest = (
            select(EventDelivery, EventSubscription)
            .join(EventSubscription, EventSubscription.id == EventDelivery.subscription_id)
            .where(
                EventSubscription.enabled.is_(True),
                EventDelivery.status == "pending",
                ~exists().where(
                    and_(
                        earlier.subscription_id == EventDelivery.subscription_id,
                        earlier.status == "pending",
                        earlier.change_id < EventDelivery.change_id,
                    )
                ),
            )
        )
        found: list[Due] = []
        next_at: datetime | None = None
        for delivery, subscription in session.execute(oldest).all():
            if subscription.id in busy:
                continue
            if delivery.next_attempt_at > now:
                next_at = delivery.next_attempt_at if next_at is None else min(next_at, delivery.next_attempt_at)
                continue
            found.append(_due(secrets, delivery, subscription, now))
        return Waiting(found, next_at)


def _due(box: SecretBox, delivery: EventDelivery, subscription: EventSubscription, now: datetime) -> Due:
    """``delivery`` ready to send; or, when its subscription's secrets do not decrypt (a changed
    ``REGISTRY_SECRET_KEY``), ready to be recorded as failed: one subscription's bad secret must
    not stop the round, and with it every other subscription's deliveries."""
    item = Due(
        delivery_id=delivery.id,
        subscription_id=subscription.id,
        webhook_id=delivery.webhook_id,
        url="",
        secrets=(),
        body=delivery.body,
        attempts=delivery.attempts,
    )
    try:
        signing = _signing_secrets(box, subscription, now)
    except SecretKeyError:
        return replace(item, error=UNDECRYPTABLE)
    try:
        url = box.decrypt(subscription.url)
    except SecretKeyError:
        return replace(item, error=UNDECRYPTABLE_URL)
    return replace(item, url=url, secrets=signing)


def _signing_secrets(box: SecretBox, subscription: EventSubscription, now: datetime) -> tuple[str, ...]:
    current = box.decrypt(subscription.secret)
    until = subscription.previous_secret_until
    if subscription.previous_secret and until is not None and until > now:
        return (current, box.decrypt(subscription.previous_secret))
    return (current,)


def backoff_s(attempts: int, base_s: float, max_s: float) -> float:
    """Seconds before attempt ``attempts + 1`` after ``attempts`` failed ones: ``base * 2**(n-1)``, capped."""
    return float(min(max_s, base_s * (2 ** max(0, attempts - 1))))


@dataclass(frozen=True)
class Outcome:
    status_code: int | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def record(
    db: Database,
    item: Due,
    held: Held,
    outcome: Outcome,
    *,
    retry_base_s: float,
    retry_max_s: float,
    max_attempts: int,
    clock: Callable[[], datetime] = utcnow,
) -> bool:
    """Write one attempt's outcome, fenced by the lease; whether it was written."""
    now = clock()
    attempts = item.attempts + 1
    values: dict[str, Any] = {
        "attempts": attempts,
        "last_attempt_at": now,
        "last_status_code": outcome.status_code,
        "last_error": None if outcome.ok else (outcome.error or f"HTTP {outcome.status_code}")[:ERROR_CHARS],
    }
    if outcome.ok:
        values.update(status="delivered", delivered_at=now)
    elif attempts >= max_attempts:
        values.update(status="failed")
    else:
        values.update(next_attempt_at=now + timedelta(seconds=backoff_s(attempts, retry_base_s, retry_max_s)))
    still_held = exists().where(
        EventLease.name == LEASE_NAME, EventLease.holder == held.holder, EventLease.epoch == held.epoch
    )
    with db.session() as session:
        result = session.execute(
            update(EventDelivery)
            .where(
                EventDelivery.id == item.delivery_id,
                EventDelivery.status == "pending",
                EventDelivery.attempts == item.attempts,
                still_held,
            )
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def prune(db: Database, now: datetime, keep_days: int = KEEP_DAYS) -> int:
    """Delete finished deliveries older than ``keep_days`` (pending ones are kept: they are work)."""
    cutoff = now - timedelta(days=keep_days)
    with db.session() as session:
        result = session.execute(
            delete(EventDelivery)
            .where(EventDelivery.status != "pending", EventDelivery.created_at < cutoff)
            .execution_options(synchronize_session=False)
        )
        return int(result.rowcount or 0)  # type: ignore[attr-defined]
