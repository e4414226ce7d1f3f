"""Sessions written behind in batches (issue 12): cheap to make in numbers, and still durable.

Real ``mcp-registry serve`` processes (tests/serve_process.py) on SQLite and PostgreSQL. A burst
of sessions (more than ``SessionStore.BUSY_RATE`` a second) is acknowledged before its rows are
written; ``mcp_session_rows_pending`` on /metrics shows rows waiting, which is how each test knows
it exercises that path (it makes bursts until it sees some). Then:

- a session of the burst is usable at once on another replica (PostgreSQL, two processes): the
  other replica re-reads an id it does not find yet after the flush interval;
- a SIGTERM restart right after the burst keeps every session of it, with the state (log level,
  subscriptions) set before its row was written;
- ending a session whose row is not written yet works, and it stays ended after a restart;
- a lone session is stored before it is acknowledged (no row pending after its initialize);
- a row the database refuses fails alone, not its whole batch (in process, on a real database).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from registry.db.models import McpSession
from registry.mcp.sessions import STREAMABLE_HTTP, Session, SessionBacklogFull, SessionStore
from tests.conftest import replica_pair, require_postgres
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient
from tests.serve_process import ServerProcess
from tests.waiting import wait_until_async

PROTOCOL = "2025-11-25"
#: The longest flush interval (REGISTRY_SESSION_FLUSH_S is capped there): rows wait longest.
FLUSH_ENV = {"REGISTRY_SESSION_FLUSH_S": "0.5"}
RESOURCE_URI = "registry://prompts"  # any URI: subscriptions are stored as given


def _client(server: ServerProcess, session_id: str | None = None) -> StreamableHttpClient:
    client = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=15, verify=TLS))
    if session_id is not None:
        client.session_id = session_id
        client.protocol_version = PROTOCOL
    return client


def _pending_rows(server: ServerProcess) -> float:
    return server.metric("mcp_session_rows_pending")


def _burst(server: ServerProcess, http: httpx.Client, n: int) -> list[str]:
    """``n`` sessions (initialize + initialized) back to back on one connection."""
    ids = []
    for _ in range(n):
        client = StreamableHttpClient(http)
        client.initialize(PROTOCOL)
        assert client.session_id
        ids.append(client.session_id)
    return ids


def _written_behind_burst(server: ServerProcess, after: Any = None, attempts: int = 5) -> tuple[list[str], Any]:
    """A burst with rows still pending right after it (retried a few times: a flush may fall in
    between), then ``after(ids)`` at once. Returns the ids and what ``after`` returned."""
    n = SessionStore.BUSY_RATE * 2
    with httpx.Client(base_url=server.url, timeout=15, verify=TLS) as http:
        for _ in range(attempts):
            ids = _burst(server, http, n)
            if _pending_rows(server) > 0:
                return ids, after(ids) if after is not None else None
            time.sleep(0.6)  # written meanwhile: another burst
    pytest.fail(f"no burst of {n} sessions was written behind in {attempts} attempts")


def _row(database_url: str, session_id: str) -> dict[str, Any] | None:
    if database_url.startswith("sqlite"):
        with closing(sqlite3.connect(database_url.removeprefix("sqlite:///"))) as conn:
            conn.row_factory = sqlite3.Row
            found = conn.execute("SELECT * FROM mcp_sessions WHERE id = ?", (session_id,)).fetchone()
            return dict(found) if found is not None else None
    engine = create_engine(database_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            found = conn.execute(text("SELECT * FROM mcp_sessions WHERE id = :id"), {"id": session_id}).mappings()
            first = found.first()
            return dict(first) if first is not None else None
    finally:
        engine.dispose()


@pytest.fixture
def server(tmp_path: Path, database_url: str) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path / "data", database_url=database_url, env=FLUSH_ENV, args=["--seed", "demo"])
    try:
        process.start()
        yield process
    finally:
        process.stop()


def test_a_lone_session_is_stored_before_it_is_acknowledged(server: ServerProcess, database_url: str) -> None:
    client = _client(server)
    client.initialize(PROTOCOL)
    assert client.session_id
    assert _row(database_url, client.session_id) is not None
    assert _pending_rows(server) == 0


def test_a_burst_survives_a_sigterm_restart_with_its_state(server: ServerProcess, database_url: str) -> None:
    def set_state(ids: list[str]) -> str:
        last = _client(server, ids[-1])
        assert "result" in last.request("logging/setLevel", {"level": "error"})
        assert "result" in last.request("resources/subscribe", {"uri": RESOURCE_URI})
        return ids[-1]

    ids, last = _written_behind_burst(server, set_state)
    server.stop()  # SIGTERM right away: the pending rows are written on the way out
    for session_id in ids:
        assert _row(database_url, session_id) is not None, f"session {session_id} was lost by the restart"
    row = _row(database_url, last)
    assert row is not None
    assert row["log_level"] == "error"
    subscriptions = row["subscriptions"]
    assert RESOURCE_URI in (subscriptions if isinstance(subscriptions, list) else json.loads(subscriptions))
    server.start()
    for session_id in (ids[0], ids[-1]):
        answer = _client(server, session_id).request("prompts/get", {"name": "summarize", "arguments": {"text": "x"}})
        assert "result" in answer, answer


def test_ending_a_session_not_written_yet(server: ServerProcess, database_url: str) -> None:
    def end_last(ids: list[str]) -> int:
        with httpx.Client(base_url=server.url, timeout=15, verify=TLS) as http:
            headers = {"Mcp-Session-Id": ids[-1], "MCP-Protocol-Version": PROTOCOL}
            return http.delete("/mcp", headers=headers).status_code

    ids, status = _written_behind_burst(server, end_last)
    assert status == 204
    gone = _client(server, ids[-1]).post({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert gone.status_code == 404, gone.text
    server.stop()
    row = _row(database_url, ids[-1])
    assert row is None or row["ended_at"] is not None, row
    assert _row(database_url, ids[-2]) is not None
    server.start()
    gone = _client(server, ids[-1]).post({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert gone.status_code == 404, gone.text


def test_a_burst_session_is_usable_at_once_on_another_replica(tmp_path: Path, postgres_server_url: str | None) -> None:
    server_url = require_postgres(postgres_server_url)
    admin = "wb-admin-" + secrets.token_hex(6)

    class Replica(ServerProcess):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "env": {**(kwargs.get("env") or {}), **FLUSH_ENV}})

    with replica_pair(server_url, tmp_path, admin_token=admin, make=Replica) as (a, b):

        def use_on_b(ids: list[str]) -> list[int]:
            # At once, while A may still hold these rows: B waits for them rather than say 404.
            return [
                _client(b, session_id).post({"jsonrpc": "2.0", "id": 1, "method": "ping"}).status_code
                for session_id in ids[-3:]
            ]

        _, statuses = _written_behind_burst(a, use_on_b)
        assert statuses == [200, 200, 200], statuses
        # Random ids of the right shape are still told 404 (after one bounded wait).
        unknown = _client(b, secrets.token_urlsafe(32)).post({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert unknown.status_code == 404


class _BurstStore(SessionStore):
    BUSY_RATE = 1  # every session after the first successful write is written behind


async def test_a_row_the_database_refuses_fails_alone_not_the_batch(registry: Any) -> None:
    """A batch with a row the database refuses (here: an id already stored) is written row by
    row: the others are stored, the flusher goes on, and the refused one is logged."""
    store = _BurstStore(registry.db, flush_s=5.0)  # long: the test flushes by hand
    try:
        first = await store.create(Session(label="production", principal="anonymous"))  # waits: stored
        taken = Session(label="production", principal="anonymous", id=first.id)  # the same id again
        burst = [Session(label="production", principal="anonymous") for _ in range(3)]
        for session in burst:
            await store.create(session)  # written behind
        await store._insert(taken, STREAMABLE_HTTP)
        assert store.pending == 4
        assert await store.flush()
        assert store.pending == 0
        for session in burst:
            assert _stored(registry, session.id)
        later = await store.create(Session(label="production", principal="anonymous"))
        assert store.pending == 1
        assert await store.flush() and _stored(registry, later.id)
    finally:
        await store.stop()


def _stored(registry: Any, session_id: str) -> bool:
    with registry.db.session() as db_session:
        return db_session.get(McpSession, session_id) is not None


async def test_a_full_backlog_refuses_new_sessions_naming_the_limit(registry: Any) -> None:
    """Rows waiting to be written are bounded (REGISTRY_LIMIT_SESSION_PENDING_WRITES): one more
    session is refused with that name, and is not kept for later."""
    store = _BurstStore(registry.db, flush_s=5.0, max_pending=3)  # long: nothing is flushed meanwhile
    try:
        await store.create(Session(label="production", principal="anonymous"))  # waits: stored
        for _ in range(3):
            await store.create(Session(label="production", principal="anonymous"))  # written behind
        assert store.pending == 3
        refused = Session(label="production", principal="anonymous")
        with pytest.raises(SessionBacklogFull, match="REGISTRY_LIMIT_SESSION_PENDING_WRITES = 3"):
            await store.create(refused)
        assert store.pending == 3
        assert await store.flush() and store.pending == 0
        assert refused.id and not _stored(registry, refused.id) and store.peek(refused.id) is None
        await store.create(Session(label="production", principal="anonymous"))  # room again
    finally:
        await store.stop()


async def test_another_replica_is_served_soon_after_the_row_lands_in_one_shared_wait(registry: Any) -> None:
    """Store B (another replica) asked for a session store A has not written yet: B's requests
    for it share one wait, which ends at B's first read after A's write lands, not after a fixed
    bound. Counted in reads, not seconds: B polls while it waits (at least one read before the
    write), and no more than one read starts once the write has landed (a wait per request, or
    one that slept out its bound, would show more reads, or none before the write)."""
    a = _BurstStore(registry.db, flush_s=5.0)  # long: the test flushes by hand
    b = SessionStore(registry.db, flush_s=0.5)  # B's bound: 0.5 s + MISS_MARGIN_S
    reads = {"before": 0, "after": 0}
    landed = False
    real_load = b._await_row

    async def counting(load: Any) -> Any:
        def counted() -> Any:
            reads["after" if landed else "before"] += 1
            return load()

        return await real_load(counted)

    b._await_row = counting  # type: ignore[method-assign]
    try:
        await a.create(Session(label="production", principal="anonymous"))  # waits: stored
        burst = await a.create(Session(label="production", principal="anonymous"))  # written behind
        assert a.pending == 1
        asking = [asyncio.ensure_future(b.get(burst.id)) for _ in range(5)]
        await wait_until_async(lambda: reads["before"] >= 1, "B to read for the missing row")
        assert not any(task.done() for task in asking) and len(b._row_waits) == 1
        assert await a.flush()
        landed = True
        found = await asyncio.gather(*asking)
        assert all(session is not None and session.id == burst.id for session in found)
        assert len({id(session) for session in found}) == 1, "each request made its own session object"
        assert reads["after"] <= 1, f"{reads}: B read again after the row had landed"
        assert not b._row_waits
    finally:
        await a.stop()
        await b.stop()
