"""Which process delivers change events: a lease row in the database, on SQLite and PostgreSQL.

The holder renews it every third of its length; another process takes it only once it expired
(its holder stopped renewing: it stopped, was killed, lost the database). A graceful stop gives it
up at once. Every change of holder increments ``epoch``, and the deliverer records each attempt
only while the lease row still names it with that epoch (``registry.events.queue.record``): a
holder paused past its expiry, whose lease another process took meanwhile, cannot overwrite what
the new holder recorded. What it may have sent meanwhile is a duplicate with the same
``webhook-id`` (at-least-once), never a loss.
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from registry.db.engine import Database
from registry.db.models import EventLease, utcnow

LEASE_NAME = "events"


@dataclass(frozen=True)
class Held:
    """The lease as this process holds it: who and which epoch (for fenced writes)."""

    holder: str
    epoch: int


class Lease:
    def __init__(self, db: Database, seconds: float, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.db = db
        self.seconds = seconds
        self.clock = clock
        #: Unique per process start: a restarted process never mistakes its predecessor's lease for its own.
        self.holder = f"{socket.gethostname()[:80]}:{secrets.token_hex(6)}"

    def acquire(self) -> Held | None:
        """Renew the lease if held, take it if free or expired; None when another process holds it."""
        now = self.clock()
        expires = now + timedelta(seconds=self.seconds)
        with self.db.session() as session:
            renewed = session.execute(
                update(EventLease)
                .where(EventLease.name == LEASE_NAME, EventLease.holder == self.holder, EventLease.expires_at > now)
                .values(expires_at=expires)
                .execution_options(synchronize_session=False)
            )
            if renewed.rowcount == 1:  # type: ignore[attr-defined]
                epoch = session.scalar(select(EventLease.epoch).where(EventLease.name == LEASE_NAME))
                return Held(self.holder, int(epoch or 0))
            taken = session.execute(
                update(EventLease)
                .where(EventLease.name == LEASE_NAME, EventLease.expires_at <= now)
                .values(holder=self.holder, expires_at=expires, epoch=EventLease.epoch + 1)
                .execution_options(synchronize_session=False)
            )
            if taken.rowcount == 1:  # type: ignore[attr-defined]
                epoch = session.scalar(select(EventLease.epoch).where(EventLease.name == LEASE_NAME))
                return Held(self.holder, int(epoch or 0))
            exists = session.scalar(select(EventLease.name).where(EventLease.name == LEASE_NAME))
        if exists is not None:
            return None
        try:
            with self.db.session() as session:
                session.add(EventLease(name=LEASE_NAME, holder=self.holder, epoch=1, expires_at=expires))
        except IntegrityError:  # another process made it first: it holds it
            return None
        return Held(self.holder, 1)

    def release(self) -> None:
        """Give the lease up now (a graceful stop), so another process delivers at once."""
        with self.db.session() as session:
            session.execute(
                update(EventLease)
                .where(EventLease.name == LEASE_NAME, EventLease.holder == self.holder)
                .values(expires_at=self.clock() - timedelta(seconds=1))
                .execution_options(synchronize_session=False)
            )
