"""Each stateless-era ``requestState`` answers one retry: the ledger of spent ones.

A ``requestState`` (registry/mcp/input_required.py) is signed and bound to one call, but a
signature cannot say it was used: retried as is, the same state and answer ran the webhook again
each time (a deploy that asked "Deploy?" deployed three times), and a client could restart from
an earlier round forever, past the round limit. So a retry *spends* its state before the webhook
is called again: the SHA-256 of the state goes into ``spent_request_states`` with the state's own
expiry, and a state whose digest is already there is refused (-32602). The table is shared by
every replica, so a replay sent to another one is refused too; the insert's primary key decides
between two retries racing on two replicas.

The state itself is never stored, only its digest. Rows are pruned once their state has expired
(a replay is refused as expired from then on, by the signature check): at most once per
``PRUNE_EVERY_S`` per process, as part of a spend. So the table holds at most the states answered
within one state lifetime (10 minutes), each of which took a webhook call to be issued.

A state is spent before the webhook is called, not after: a call that then fails (the webhook is
down, the server stops) cannot be retried with the same state, and the client starts the call
again, as it must after an expired one. The other order would let two concurrent retries both
reach the webhook. A database that cannot be reached answers -32003 and spends nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from datetime import UTC, datetime
from typing import Final

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError

from registry.db.engine import Database
from registry.db.models import SpentRequestState

#: How often (seconds, per process) expired rows are deleted, as part of a spend.
PRUNE_EVERY_S: Final = 60.0


def state_digest(token: str) -> str:
    """What is stored for a state: its SHA-256, so the table holds nothing a client could reuse."""
    return hashlib.sha256(token.encode()).hexdigest()


class SpentStates:
    """Spends ``requestState`` tokens in the database (``spent_request_states``)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._last_pruned = -PRUNE_EVERY_S

    async def spend(self, token: str, expires_at: float) -> bool:
        """Record ``token`` as used until ``expires_at`` (epoch seconds); False when it already was."""
        return await asyncio.to_thread(self._spend, state_digest(token), datetime.fromtimestamp(expires_at, UTC))

    def _spend(self, digest: str, expires_at: datetime) -> bool:
        now = time.monotonic()
        if now - self._last_pruned >= PRUNE_EVERY_S:
            self._last_pruned = now
            self.prune()
        try:
            with self.db.session() as session:
                session.add(SpentRequestState(digest=digest, expires_at=expires_at))
        except IntegrityError:
            return False
        return True

    def prune(self) -> int:
        """Delete the rows whose state has expired; returns how many."""
        with self.db.session() as session:
            result = session.execute(delete(SpentRequestState).where(SpentRequestState.expires_at <= datetime.now(UTC)))
        return int(getattr(result, "rowcount", 0) or 0)
