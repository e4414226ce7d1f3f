"""MCP sessions: who a connection is, which label it is served, what it asked for.

The dispatcher only sees ``ClientState``; Streamable HTTP keeps it in a database row
(``mcp_sessions``) with a per-process cache, so any replica serves any session and a restart
loses none. Legacy HTTP+SSE serves a session from memory (it lives on its stream, on one
replica) and only records a row, so that every replica can list it among the connected agents.
stdio keeps it in memory: the host owns that process.

Rows are written in batches by one flusher task (SQLAlchemy Core executemany, one transaction), so
that thousands of agents reconnecting at once (a deploy) cost little each. How a new session is
acknowledged depends on how many are being made:

- a lone session (fewer than ``BUSY_RATE`` a second), or any while the database is not known to be
  writable (the last write failed, one has been under way too long, a liveness check just failed):
  ``initialize`` waits until its row is committed, as a single write would, and answers 503 if it
  cannot be; the flusher writes at once for it;
- during a burst, with the last write a success: ``initialize`` answers at once and the row is
  written with the next batch, within ``flush_s``. A replica asked for an id it does not have
  yet re-reads once after ``flush_s`` plus a margin (see ``get``), so the session is usable
  everywhere within a second; a graceful stop (SIGTERM) writes what is pending. Only a crash (or
  a stop while the database is down) loses the sessions of the last interval: their clients are
  answered 404 and initialize again, as the transport's specification has them do.

Until its row is written, a session's later state (log level, subscriptions) is simply taken
from the session object when the batch is written: no separate UPDATE.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, insert, select, text, update

from registry.db.engine import (
    Database,
    DatabaseUnavailable,
    deadline,
    describe,
    is_unavailable,
    warn_unavailable,
)
from registry.db.models import McpSession
from registry.mcp.protocol import RequestId

log = logging.getLogger("registry.mcp")

_client_numbers = itertools.count(1)
#: What ``new_session_id`` makes: only such ids are worth waiting for (``SessionStore.get``).
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")


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


class SessionBacklogFull(DatabaseUnavailable):
    """Too many new sessions are waiting for their rows (a DatabaseUnavailable: the database is
    not keeping up), refused with a message naming the limit rather than the generic one."""


def new_session_id() -> str:
    """256 random bits, URL-safe: visible ASCII as the transport spec requires."""
    return secrets.token_urlsafe(32)


class SessionStore:
    #: How often a busy session's last_seen_at is written back (seconds).
    TOUCH_INTERVAL = 60.0
    #: Session ids per UPDATE when touches are written back (bound parameters per statement).
    TOUCH_BATCH = 500
    CACHE_SIZE = 50_000
    #: Sessions made in a second from which new ones are written behind (see the module).
    BUSY_RATE = 20
    #: A write under way for longer than this: the database is slow or frozen, so new sessions
    #: wait for theirs (and are answered 503 if it fails) instead of being written behind.
    STUCK_S = 1.0
    #: Most rows in one INSERT transaction.
    BATCH_ROWS = 2_000
    #: Requests waiting, at once, for another replica's session to be written (``get``); beyond
    #: it an unknown id is answered 404 at once, so random ids cost one read each and no waiting.
    MAX_MISS_WAITS = 64
    #: Added to ``flush_s`` for that wait: the other replica's write itself.
    MISS_MARGIN_S = 0.3
    #: The first re-read of a missing row comes this soon; each pause after is twice the last.
    MISS_FIRST_POLL_S = 0.02
    #: How long a stopping process may spend writing its pending sessions.
    FINAL_FLUSH_S = 5.0

    def __init__(
        self,
        db: Database,
        *,
        idle_timeout_s: float = 3600.0,
        flush_s: float = 0.2,
        max_pending: int = 10_000,
    ) -> None:
        self.db = db
        self.idle_timeout_s = idle_timeout_s
        # Write activity back often enough that a live session never looks idle to a sweep.
        self.touch_interval = min(self.TOUCH_INTERVAL, idle_timeout_s / 4)
        self.flush_s = max(0.01, float(flush_s))
        self.max_pending = max(1, int(max_pending))
        self._cache: OrderedDict[str, Session] = OrderedDict()
        #: Rows not written yet (session, transport), and the batch being written.
        self._pending: dict[str, tuple[Session, str]] = {}
        self._writing: dict[str, tuple[Session, str]] = {}
        #: Creations waiting for their row to be committed (durable before acknowledged), by id.
        self._waiters: dict[str, asyncio.Future[None]] = {}
        #: Set when a write ends (success or not): save_state/end of a row being written wait for it.
        self._written: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._healthy = False
        self._writing_since: float | None = None
        self._rate_window = 0.0
        self._rate_count = 0
        self._rate_previous = 0
        #: Session ids whose rows are being waited for (``_await_row``), each with its wait.
        self._row_waits: dict[str, asyncio.Future[McpSession | None]] = {}
        #: Figures for tests and diagnostics.
        self.batches = 0
        self.written = 0
        self.failures = 0
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
        """Queue the session's row; wait until it is committed unless a burst is being written
        behind (see the module). Raises DatabaseUnavailable when it cannot be stored."""
        if len(self._pending) + len(self._writing) >= self.max_pending:
            raise SessionBacklogFull(
                f"{len(self._pending) + len(self._writing)} new sessions are waiting to be stored "
                f"(limit REGISTRY_LIMIT_SESSION_PENDING_WRITES = {self.max_pending}); retry shortly"
            )
        if self._stopping:  # shutting down: no flusher any more, write it here
            await asyncio.to_thread(self._write_rows, [_row(session, transport)])
            return
        self._ensure_started()
        assert self._wake is not None
        self._pending[session.id] = (session, transport)
        if self._write_behind():
            if len(self._pending) == 1 or len(self._pending) >= self.BATCH_ROWS:
                self._wake.set()  # the first row starts the flusher's interval; a full batch ends it
            return
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[session.id] = written
        self._wake.set()
        try:
            await written
        except BaseException:
            # Not stored (or the caller gave up): not acknowledged, so not kept for later either.
            self._waiters.pop(session.id, None)
            self._pending.pop(session.id, None)
            raise

    def _write_behind(self) -> bool:
        """Whether a new session may be acknowledged before its row is written: sessions are
        coming in numbers, and the database took the last write and is not known to be failing."""
        now = time.monotonic()
        if now - self._rate_window >= 1.0:
            self._rate_previous = self._rate_count if now - self._rate_window < 2.0 else 0
            self._rate_window = now
            self._rate_count = 0
        self._rate_count += 1
        if max(self._rate_count, self._rate_previous) < self.BUSY_RATE or not self._healthy:
            return False
        if self._writing_since is not None and now - self._writing_since > self.STUCK_S:
            return False
        try:
            self.db.availability.check()
        except DatabaseUnavailable:
            return False
        return True

    # -- the flusher ------------------------------------------------------------------------
    def start(self) -> None:
        """Accept sessions again after ``stop`` (a runtime started anew); the flusher starts
        with the first row."""
        self._stopping = False

    def _ensure_started(self) -> None:
        task = self._task
        if task is not None and (task.done() or task.get_loop() is not asyncio.get_running_loop()):
            task = self._task = None  # its loop ended (a test's, or a restarted runtime's)
        if task is None and not self._stopping:
            self._wake = asyncio.Event()
            self._written = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="session-flusher")

    async def _run(self) -> None:
        wake = self._wake
        assert wake is not None
        while not self._stopping:
            await wake.wait()  # set by the first pending row, a waiter, a full batch, stop()
            wake.clear()
            if self._stopping:
                break
            if not self._waiters and len(self._pending) < self.BATCH_ROWS:
                # Rows written behind: gather for an interval (a waiter or a full batch cuts it short).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self.flush_s)
                wake.clear()
            if not await self.flush():
                with contextlib.suppress(TimeoutError):  # failed: retry after an interval
                    await asyncio.wait_for(wake.wait(), self.flush_s)
            if self._pending:
                wake.set()  # more came (or stayed): go again

    async def flush(self) -> bool:
        """Write the pending rows (those of the sessions still open), in one transaction; answer
        their waiters. On failure the rows stay pending (retried) and the waiters get the error."""
        if self._writing or not self._pending:
            return True
        batch = dict(list(self._pending.items())[: self.BATCH_ROWS])
        for session_id in batch:
            del self._pending[session_id]
        waiters = {i: self._waiters.pop(i) for i in batch if i in self._waiters}
        self._writing = batch
        # The session objects as they are now: state changed since creation goes in the row.
        rows = [_row(session, transport) for session, transport in batch.values()]
        self._writing_since = time.monotonic()
        failed: dict[str, Exception] = {}
        unavailable: Exception | None = None
        try:
            try:
                await asyncio.to_thread(self._write_rows, rows)
            except asyncio.CancelledError:
                self._pending.update(batch)
                for waiter in waiters.values():
                    waiter.cancel()
                raise
            except Exception as exc:
                if is_unavailable(exc) or len(rows) == 1:
                    raise
                # Not the database being away but a row it refuses: write them one at a time, so
                # a bad row fails its own session only (as a single insert did), not every batch.
                failed = await asyncio.to_thread(self._write_each, rows)
        except Exception as exc:
            if is_unavailable(exc):
                unavailable = exc
            else:
                failed = dict.fromkeys(batch, exc)
        finally:
            self._writing = {}
            self._writing_since = None
            written = self._written
            if written is not None:
                written.set()
                self._written = asyncio.Event()
        if unavailable is not None:
            self.failures += 1
            self._healthy = False
            # Kept for the next write (the waiters' own rows are dropped by their callers).
            self._pending = {**batch, **self._pending}
            for waiter in waiters.values():
                if not waiter.done():
                    waiter.set_exception(unavailable)
            warn_unavailable(log, f"{len(self._pending)} new MCP sessions are kept until it is back", unavailable)
            return False
        for session_id, refused in failed.items():
            log.error("could not store MCP session %s…: %s", session_id[:8], describe(refused))
        self._healthy = True
        self.batches += 1
        self.written += len(rows) - len(failed)
        for session_id, waiter in waiters.items():
            if waiter.done():
                continue
            if session_id in failed:
                waiter.set_exception(failed[session_id])
            else:
                waiter.set_result(None)
        return True

    def _write_each(self, rows: list[dict[str, Any]]) -> dict[str, Exception]:
        """Each row in a transaction of its own; returns the refused ones' errors by id."""
        failed: dict[str, Exception] = {}
        for row in rows:
            try:
                self._write_rows([row])
            except Exception as exc:
                if is_unavailable(exc):
                    raise
                failed[row["id"]] = exc
        return failed

    def _write_rows(self, rows: list[dict[str, Any]]) -> None:
        """One transaction, one multi-row INSERT (SQLAlchemy Core executemany: no ORM objects)."""
        with self.db.session() as db_session:
            db_session.execute(insert(McpSession), rows)

    async def stop(self, timeout_s: float | None = None) -> None:
        """Write what is pending (within ``timeout_s``) and stop the flusher (SIGTERM: a restart
        loses no session). What cannot be written in time is logged as lost."""
        timeout_s = self.FINAL_FLUSH_S if timeout_s is None else timeout_s
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            assert self._wake is not None
            self._wake.set()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(task, timeout_s)
        end = time.monotonic() + timeout_s
        with deadline(timeout_s):
            while self._pending and time.monotonic() < end:
                if not await self.flush():
                    break
        if self._pending:
            log.warning("%d new MCP sessions could not be stored before shutdown", len(self._pending))

    @property
    def pending(self) -> int:
        """Rows not written yet (including the batch being written)."""
        return len(self._pending) + len(self._writing)

    async def _until_written(self, session_id: str) -> None:
        """If ``session_id``'s row is being written now, wait until that write ends (then the
        row is either in the database or pending again)."""
        while session_id in self._writing and self._written is not None:
            await self._written.wait()

    async def save_state(self, session: Session) -> None:
        """Persist what a client changed (log level, subscriptions, initialized)."""
        await self._until_written(session.id)
        if session.id in self._pending:
            return  # its row is not written yet: the batch takes the session as it is then
        values = {"log_level": session.log_level, "subscriptions": sorted(session.subscriptions)}

        def write() -> None:
            with self.db.session() as db_session:
                db_session.execute(update(McpSession).where(McpSession.id == session.id).values(**values))

        await asyncio.to_thread(write)

    async def end(self, session_id: str) -> bool:
        self._cache.pop(session_id, None)
        await self._until_written(session_id)
        if self._pending.pop(session_id, None) is not None:
            return True  # never written: nothing to mark, and no other replica knows it

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
        if session.id in self._pending or session.id in self._writing:
            return  # its row, when written, says it was seen now
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
    def peek(self, session_id: str) -> Session | None:
        """The session from this process's cache, if it is there and was active lately (no await:
        nearly every request); None: ask ``get``."""
        cached = self._cache.get(session_id)
        if cached is not None and time.monotonic() - cached.last_active <= self.idle_timeout_s:
            self._cache.move_to_end(session_id)
            return cached
        return None

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
        pending = self._pending.get(session_id) or self._writing.get(session_id)
        if pending is not None and pending[1] != LEGACY_SSE:
            self._remember(pending[0])
            return pending[0]

        def load() -> McpSession | None:
            with self.db.session() as db_session:
                return db_session.get(McpSession, session_id)

        row = await asyncio.to_thread(load)
        if row is None and _SESSION_ID.fullmatch(session_id):
            waiting = self._row_waits.get(session_id)
            if waiting is None and len(self._row_waits) < self.MAX_MISS_WAITS:
                waiting = self._row_waits[session_id] = asyncio.ensure_future(self._await_row(load))
                waiting.add_done_callback(lambda done: self._row_wait_ended(session_id, done))
            if waiting is not None:
                row = await asyncio.shield(waiting)
                cached = self._cache.get(session_id)
                if cached is not None:
                    return cached  # another request waiting for the same row made it first
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

    async def _await_row(self, load: Callable[[], McpSession | None]) -> McpSession | None:
        """The row of a session perhaps made a moment ago on another replica and not written yet
        (written behind, within its flush interval), read again until it shows or that interval
        and a margin have passed.

        The reads come closer together early (20, 40, 80 ... ms apart), so a request usually
        waits about as long as the other replica's flush still had to run, not the whole bound
        (it waited a fixed 0.5 s before: one request in a hundred at 32 agents on ``--workers 2``).
        One wait per session id, shared by every request for it; at most MAX_MISS_WAITS ids at
        once, so random ids cost a few reads each and nothing more."""
        deadline = time.monotonic() + self.flush_s + self.MISS_MARGIN_S
        pause = self.MISS_FIRST_POLL_S
        while True:
            await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            row = await asyncio.to_thread(load)
            if row is not None or time.monotonic() >= deadline:
                return row
            pause *= 2

    def _row_wait_ended(self, session_id: str, done: asyncio.Future[McpSession | None]) -> None:
        self._row_waits.pop(session_id, None)
        # Every request that waited may have gone: a failed read is then retrieved here, not
        # logged as "exception was never retrieved" (a waiting request still gets it raised).
        if not done.cancelled():
            done.exception()

    def _remember(self, session: Session) -> None:
        self._cache[session.id] = session
        self._cache.move_to_end(session.id)
        while len(self._cache) > self.CACHE_SIZE:
            self._cache.popitem(last=False)

    def evict(self, session_id: str) -> None:
        # (Another replica ended it: it was written, so it is not pending here.)
        self._cache.pop(session_id, None)

    def cached(self) -> list[Session]:
        return list(self._cache.values())


def _row(session: Session, transport: str) -> dict[str, Any]:
    """The ``mcp_sessions`` row of a session as it is now (created and last seen: now)."""
    now = datetime.now(UTC)
    return {
        "id": session.id,
        "protocol_version": session.protocol_version or "",
        "label": session.label,
        "principal": session.principal,
        "token_id": session.token_id,
        "user": session.user,
        "client_info": session.client_info,
        "client_capabilities": session.client_capabilities,
        "log_level": session.log_level,
        "subscriptions": sorted(session.subscriptions),
        "transport": transport,
        "created_at": now,
        "last_seen_at": now,
        "ended_at": None,
    }
