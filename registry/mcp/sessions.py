"""MCP sessions: who a connection is, which label it is served, what it asked for.

The dispatcher only sees ``ClientState``; Streamable HTTP keeps it in a database row
(``mcp_sessions``) with a per-process cache, so any replica serves any session and a restart
loses none. Legacy HTTP+SSE serves a session from memory (it lives on its stream, on one
replica) and only records a row, so that every replica can list it among the connected agents.
stdio keeps it in memory: the host owns that process.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, text, update

from registry.db.engine import Database
from registry.db.models import McpSession
from registry.mcp.protocol import RequestId

_client_numbers = itertools.count(1)


@dataclass(eq=False)
class ClientState:
    """What the protocol layer knows about the caller, however the transport identifies it."""

    label: str
    principal: str
    token_id: int | None = None
    #: A single-sign-on user's subject (None: a token or anonymous); with ``token_id``, who the
    #: caller is for usage counts and ownership checks.
    user: str | None = None
    #: Teams whose entries this client sees besides global ones; None: every team (an admin).
    #: Set from the authenticated principal on every request; the default shows global entries only.
    visible_teams: frozenset[str] | None = frozenset()
    protocol_version: str | None = None
    client_info: dict[str, Any] = field(default_factory=dict)
    client_capabilities: dict[str, Any] = field(default_factory=dict)
    log_level: str | None = None
    subscriptions: set[str] = field(default_factory=set)
    initialized: bool = False
    #: Requests being handled in this process, for notifications/cancelled.
    in_flight: dict[RequestId, asyncio.Task[Any]] = field(default_factory=dict)
    #: Identifies this client object in this process (completion history of callers without a
    #: token or session id: stdio).
    history_id: int = field(default_factory=lambda: next(_client_numbers))


@dataclass(eq=False)
class Session(ClientState):
    id: str = ""
    last_touch: float = 0.0
    last_active: float = field(default_factory=time.monotonic)


#: PostgreSQL channel on which a replica announces a session it ended, so the others drop it.
SESSION_END_CHANNEL = "registry_session_ended"
#: ``mcp_sessions.transport`` values.
STREAMABLE_HTTP = "streamable-http"
LEGACY_SSE = "sse"


def new_session_id() -> str:
    """256 random bits, URL-safe: visible ASCII as the transport spec requires."""
    return secrets.token_urlsafe(32)


class SessionStore:
    #: How often a busy session's last_seen_at is written back (seconds).
    TOUCH_INTERVAL = 60.0
    #: Session ids per UPDATE when touches are written back (bound parameters per statement).
    TOUCH_BATCH = 500
    CACHE_SIZE = 50_000

    def __init__(self, db: Database, *, idle_timeout_s: float = 3600.0) -> None:
        self.db = db
        self.idle_timeout_s = idle_timeout_s
        # Write activity back often enough that a live session never looks idle to a sweep.
        self.touch_interval = min(self.TOUCH_INTERVAL, idle_timeout_s / 4)
        self._cache: OrderedDict[str, Session] = OrderedDict()
        #: Sessions touched since the last write-back (``touch``), written after this loop turn.
        self._touched: set[str] = set()

    # -- writes -------------------------------------------------------------------------
    async def create(self, session: Session, *, transport: str = STREAMABLE_HTTP) -> Session:
        session.id = new_session_id()
        session.last_touch = time.monotonic()
        await self._insert(session, transport)
        self._remember(session)
        return session

    async def record(self, session: Session, *, transport: str) -> None:
        """A row for a session its transport serves from memory (HTTP+SSE, whose id it made):
        listed with the connected agents on every replica, never served from this store."""
        session.last_touch = time.monotonic()
        await self._insert(session, transport)

    async def _insert(self, session: Session, transport: str) -> None:
        row = McpSession(
            id=session.id,
            protocol_version=session.protocol_version or "",
            label=session.label,
            principal=session.principal,
            token_id=session.token_id,
            user=session.user,
            client_info=session.client_info,
            client_capabilities=session.client_capabilities,
            log_level=session.log_level,
            subscriptions=sorted(session.subscriptions),
            transport=transport,
        )

        def insert() -> None:
            with self.db.session() as db_session:
                db_session.add(row)

        await asyncio.to_thread(insert)

    async def save_state(self, session: Session) -> None:
        """Persist what a client changed (log level, subscriptions, initialized)."""
        values = {"log_level": session.log_level, "subscriptions": sorted(session.subscriptions)}

        def write() -> None:
            with self.db.session() as db_session:
                db_session.execute(update(McpSession).where(McpSession.id == session.id).values(**values))

        await asyncio.to_thread(write)

    async def end(self, session_id: str) -> bool:
        self._cache.pop(session_id, None)

        def write() -> int:
            with self.db.session() as db_session:
                result = db_session.execute(
                    update(McpSession)
                    .where(McpSession.id == session_id, McpSession.ended_at.is_(None))
                    .values(ended_at=datetime.now(UTC))
                )
                if self.db.is_postgres:
                    db_session.execute(
                        text("SELECT pg_notify(:channel, :id)"), {"channel": SESSION_END_CHANNEL, "id": session_id}
                    )
                return int(result.rowcount)  # type: ignore[attr-defined]

        return await asyncio.to_thread(write) > 0

    def touch(self, session: Session) -> None:
        """Note activity; writes to the database at most once per TOUCH_INTERVAL.

        Batched: the sessions touched in one turn of the event loop are written by one
        transaction after it. A keep-alive tick touches every stream's session in the same turn;
        with 10,000 streams, one write each was 10,000 transactions queued on the worker threads,
        and every request needing the database waited behind them for seconds.
        """
        now = time.monotonic()
        session.last_active = now
        if now - session.last_touch < self.touch_interval:
            return
        session.last_touch = now
        self._touched.add(session.id)
        if len(self._touched) == 1:
            asyncio.get_running_loop().call_soon(self._write_touched)

    def _write_touched(self) -> None:
        ids, self._touched = sorted(self._touched), set()

        def write() -> None:
            stamp = datetime.now(UTC)
            with self.db.session() as db_session:
                for first in range(0, len(ids), self.TOUCH_BATCH):
                    chunk = ids[first : first + self.TOUCH_BATCH]
                    db_session.execute(update(McpSession).where(McpSession.id.in_(chunk)).values(last_seen_at=stamp))

        task = asyncio.get_running_loop().run_in_executor(None, write)
        task.add_done_callback(lambda f: f.exception())

    async def sweep(self) -> list[str]:
        """Delete sessions idle past the timeout (and ended ones); returns their ids."""
        cutoff = datetime.now(UTC) - timedelta(seconds=self.idle_timeout_s)

        def write() -> list[str]:
            with self.db.session() as db_session:
                expired = list(
                    db_session.scalars(
                        select(McpSession.id).where(
                            (McpSession.last_seen_at < cutoff) | McpSession.ended_at.is_not(None)
                        )
                    )
                )
                if expired:
                    db_session.execute(delete(McpSession).where(McpSession.id.in_(expired)))
                return expired

        expired = await asyncio.to_thread(write)
        for session_id in expired:
            self._cache.pop(session_id, None)
        return expired

    # -- reads --------------------------------------------------------------------------
    async def get(self, session_id: str) -> Session | None:
        cached = self._cache.get(session_id)
        if cached is not None:
            if time.monotonic() - cached.last_active <= self.idle_timeout_s:
                self._cache.move_to_end(session_id)
                return cached
            # Idle here for too long: another replica may have kept it alive, so ask the database.
            self._cache.pop(session_id, None)
        if not session_id or len(session_id) > 64:
            return None

        def load() -> McpSession | None:
            with self.db.session() as db_session:
                return db_session.get(McpSession, session_id)

        row = await asyncio.to_thread(load)
        # An HTTP+SSE session's row is a listing only: its id does not open a Streamable HTTP session.
        if row is None or row.ended_at is not None or row.transport == LEGACY_SSE:
            return None
        last_seen = row.last_seen_at if row.last_seen_at.tzinfo else row.last_seen_at.replace(tzinfo=UTC)
        if datetime.now(UTC) - last_seen > timedelta(seconds=self.idle_timeout_s):
            return None
        session = Session(
            label=row.label,
            principal=row.principal,
            token_id=row.token_id,
            user=row.user,
            protocol_version=row.protocol_version,
            client_info=row.client_info,
            client_capabilities=row.client_capabilities,
            log_level=row.log_level,
            subscriptions=set(row.subscriptions),
            initialized=True,
            id=row.id,
            last_touch=0.0,
        )
        self._remember(session)
        return session

    def _remember(self, session: Session) -> None:
        self._cache[session.id] = session
        self._cache.move_to_end(session.id)
        while len(self._cache) > self.CACHE_SIZE:
            self._cache.popitem(last=False)

    def evict(self, session_id: str) -> None:
        self._cache.pop(session_id, None)

    def cached(self) -> list[Session]:
        return list(self._cache.values())
