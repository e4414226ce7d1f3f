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
        #: What this process last wrote as holder (None: it does not hold the lease).
        self._held: Held | None = None
        self._expires: datetime | None = None

    def acquire(self) -> Held | None:
        """Renew the lease if held, take it if free or expired; None when another process holds it.

        Called every round (each change wakes the deliverer): the holder writes only once a third of
        the lease has passed since its last renewal (only it can extend its own lease, so what it
        wrote last is still true), and the others only read, until the lease has lapsed."""
        now = self.clock()
        held, expires = self._held, self._expires
        if held is not None and expires is not None and now < expires - timedelta(seconds=self.seconds * 2 / 3):
            return held
        new_expiry = now + timedelta(seconds=self.seconds)
        with self.db.session() as session:
            row = session.scalar(select(EventLease).where(EventLease.name == LEASE_NAME))
            if row is None:
                pass  # made below, in a transaction of its own
            elif row.holder == self.holder and row.expires_at > now:
                renewed = session.execute(
                    update(EventLease)
                    .where(
                        EventLease.name == LEASE_NAME, EventLease.holder == self.holder, EventLease.epoch == row.epoch
                    )
                    .values(expires_at=new_expiry)
                    .execution_options(synchronize_session=False)
                )
                return self._keep(Held(self.holder, row.epoch) if renewed.rowcount == 1 else None, new_expiry)  # type: ignore[attr-defined]
            elif row.expires_at <= now:
                # Compare-and-set on the epoch: of two processes taking it at once, one wins.
                taken = session.execute(
                    update(EventLease)
                    .where(EventLease.name == LEASE_NAME, EventLease.epoch == row.epoch, EventLease.expires_at <= now)
                    .values(holder=self.holder, expires_at=new_expiry, epoch=row.epoch + 1)
                    .execution_options(synchronize_session=False)
                )
                return self._keep(Held(self.holder, row.epoch + 1) if taken.rowcount == 1 else None, new_expiry)  # type: ignore[attr-defined]
            else:
                return self._keep(None, None)
        try:
            with self.db.session() as session:
                session.add(EventLease(name=LEASE_NAME, holder=self.holder, epoch=1, expires_at=new_expiry))
        except IntegrityError:  # another process made it first: it holds it
            return self._keep(None, None)
        return self._keep(Held(self.holder, 1), new_expiry)

    def _keep(self, held: Held | None, expires: datetime | None) -> Held | None:
        self._held, self._expires = held, expires if held is not None else None
        return held

    def release(self) -> None:
        """Give the lease up now (a graceful stop), so another process delivers at once."""
        self._keep(None, None)
        with self.db.session() as session:
            session.execute(
                update(EventLease)
                .where(EventLease.name == LEASE_NAME, EventLease.holder == self.holder)
                .values(expires_at=self.clock() - timedelta(seconds=1))
                .execution_options(synchronize_session=False)
            )
