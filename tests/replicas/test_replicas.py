"""Two real registry processes on one PostgreSQL database, as behind a load balancer.

Sessions made on one replica are served by the other; an admin edit through one reaches a GET
stream on the other (LISTEN/NOTIFY); a stream that missed a change and reconnects elsewhere
with Last-Event-ID gets it replayed once; a restart loses no session.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import threading
import time

import httpx

from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient, run_article_walk
from tests.replica_pairs import replicas_fixture
from tests.serve_process import ServerProcess, free_port
from tests.stream_listener import StreamListener
from tests.waiting import wait_until

ADMIN = "replica-admin-" + secrets.token_hex(6)


class Replica(ServerProcess):
    """One registry process of the pair (see ``replica_pair``), with a raw MCP client at hand."""

    def mcp(self, session_id: str | None = None) -> StreamableHttpClient:
        client = StreamableHttpClient(httpx.Client(base_url=self.url, timeout=15, verify=TLS))
        client.session_id = session_id
        client.protocol_version = "2025-11-25" if session_id else None
        return client


replicas = replicas_fixture("replicas", admin_token=ADMIN, make=Replica)


PROBE = "replica-probe"


def _edit_probe(base_url: str, text: str) -> None:
    """Save a new version of the probe prompt (creating it first), leaving the demo bundle as it is:
    the replicas are shared by the tests of this module."""
    # A new description each time: a list change, so sessions are told (a template-only edit is not).
    body = {"template": text + " {{ text }}", "description": text, "arguments": [{"name": "text", "required": True}]}
    # A new connection per request: through the balancer, consecutive requests hit different replicas.
    no_reuse = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {ADMIN}"}, limits=no_reuse, timeout=15, verify=TLS
    ) as admin:
        response = admin.put(f"/api/v1/prompts/{PROBE}", json=body)
        if response.status_code == 404:
            response = admin.post("/api/v1/prompts", json={"name": PROBE, **body})
        assert response.status_code in (200, 201), response.text


def _open_session(replica: Replica) -> str:
    client = replica.mcp()
    client.initialize("2025-11-25")
    assert client.session_id
    return client.session_id


def test_session_created_on_one_replica_is_served_by_the_other(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    session_id = _open_session(a)
    answer = b.mcp(session_id).request("prompts/get", {"name": "summarize", "arguments": {"text": "hi"}})
    assert answer["result"]["messages"][0]["content"]["text"].endswith("hi")
    assert b.mcp("no-such-session").post({"jsonrpc": "2.0", "id": 1, "method": "ping"}).status_code == 404


def test_edit_through_one_replica_reaches_a_stream_on_the_other(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    session_id = _open_session(a)
    listener = StreamListener(a.url, session_id)
    try:
        priming = listener.next()
        assert priming.data == "" and priming.id is not None
        started = time.monotonic()
        _edit_probe(b.url, "Edited on B:")
        event = listener.next(timeout=10)
        assert event.json() == {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}
        assert time.monotonic() - started < 5
        # ...and the new version is what the session is now served, on either replica.
        answer = a.mcp(session_id).request("prompts/get", {"name": PROBE, "arguments": {"text": "x"}})
        assert answer["result"]["messages"][0]["content"]["text"] == "Edited on B: x"
    finally:
        listener.close()


def test_a_missed_change_is_replayed_exactly_once_on_another_replica(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    session_id = _open_session(a)
    first = StreamListener(a.url, session_id)
    priming = first.next()
    first.close()  # the client drops...
    _edit_probe(b.url, "While away:")  # ...misses this change...
    # ...and reconnects to the other replica with the last id it saw.
    second = StreamListener(b.url, session_id, last_event_id=priming.id)
    try:
        assert second.next().data == ""  # the new stream's priming event
        replayed = second.next()
        assert replayed.json()["method"] == "notifications/prompts/list_changed"
        assert replayed.id is not None and replayed.id.endswith(":0")
        assert second.drain(1.5) == []  # no duplicate arrives live
        _edit_probe(a.url, "Live again:")
        live = second.next()
        assert live.json()["method"] == "notifications/prompts/list_changed"
        assert live.id is not None
        assert int(live.id.split(":")[0]) > int(replayed.id.split(":")[0])
        assert second.drain(1.0) == []
    finally:
        second.close()


def test_a_replica_restart_loses_no_session(replicas: tuple[Replica, Replica]) -> None:
    a, _b = replicas
    session_id = _open_session(a)
    a.stop()
    a.start()
    answer = a.mcp(session_id).request("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
    assert answer["result"]["content"][0]["text"] == "1 + 2 = 3"


def test_ending_a_session_on_one_replica_ends_it_on_the_other(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    session_id = _open_session(a)
    assert a.mcp(session_id).request("ping")["result"] == {}  # now cached on a
    assert b.mcp(session_id).http.delete("/mcp", headers={"Mcp-Session-Id": session_id}).status_code == 204
    wait_until(
        lambda: a.mcp(session_id).post({"jsonrpc": "2.0", "id": 1, "method": "ping"}).status_code == 404,
        "the session ended on b to be unknown (404) on a",
        timeout=5,
        interval=0.1,
    )


def test_a_tokens_teams_changed_on_one_replica_apply_at_once_on_the_other(replicas: tuple[Replica, Replica]) -> None:
    """Issue 25, item 8: the change is announced (TOKEN_CHANGED_CHANNEL), so the other replica
    forgets the token's cached verification well before that cache would expire (5 s)."""
    a, b = replicas
    suffix = secrets.token_hex(3)
    team, prompt = f"rteam-{suffix}", f"rprompt-{suffix}"
    with httpx.Client(base_url=b.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=15, verify=TLS) as admin:
        assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
        made = admin.post("/api/v1/prompts", json={"name": prompt, "template": "Hi", "team": team})
        assert made.status_code == 201, made.text
        token = admin.post("/api/v1/tokens", json={"name": f"ragent-{suffix}", "scopes": ["agent"]}).json()
        agent = a.mcp()
        agent.extra_headers = {"Authorization": f"Bearer {token['token']}"}
        agent.initialize("2025-11-25")

        def listed() -> set[str]:
            return {p["name"] for p in agent.request("prompts/list", {})["result"]["prompts"]}

        assert prompt not in listed()  # the token is verified (and cached) on a
        changed = admin.put(f"/api/v1/tokens/{token['id']}/teams", json={"teams": {team: "viewer"}})
        assert changed.status_code == 200, changed.text
        wait_until(lambda: prompt in listed(), "a to see the token's new team", timeout=3, interval=0.1)


class RoundRobinBalancer:
    """A plain TCP load balancer: each new connection goes to the next replica (no affinity)."""

    def __init__(self, backends: list[Replica]) -> None:
        self.backends = backends
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = [0] * len(backends)
        self._next = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
            index = self._next % len(self.backends)
            self._next += 1
            self.connections[index] += 1
            backend = self.backends[index]
            try:
                server_reader, server_writer = await asyncio.open_connection("127.0.0.1", backend.port)
            except OSError:
                client_writer.close()
                return
            await asyncio.gather(pipe(client_reader, server_writer), pipe(server_reader, client_writer))

        async def main() -> None:
            self._server = await asyncio.start_server(handle, "127.0.0.1", self.port)
            self._ready.set()
            await self._server.serve_forever()

        with contextlib.suppress(asyncio.CancelledError, RuntimeError):
            self._loop.run_until_complete(main())
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._server.close)
        self._thread.join(timeout=10)


def test_everything_works_through_a_round_robin_balancer(replicas: tuple[Replica, Replica]) -> None:
    """The compose topology: clients talk to a load balancer that spreads connections over replicas."""
    a, b = replicas
    balancer = RoundRobinBalancer([a, b])
    try:
        # A new connection per request, so consecutive requests land on alternating replicas.
        no_reuse = httpx.Limits(max_keepalive_connections=0)
        client = StreamableHttpClient(httpx.Client(base_url=balancer.url, timeout=15, limits=no_reuse, verify=TLS))
        run_article_walk(client.rpc, "2025-11-25")
        assert client.session_id is not None
        listener = StreamListener(balancer.url, client.session_id)
        try:
            assert listener.next().data == ""
            _edit_probe(balancer.url, "Via the balancer:")
            assert listener.next().json()["method"] == "notifications/prompts/list_changed"
        finally:
            listener.close()
        assert min(balancer.connections) >= 4, balancer.connections  # both replicas did real work
    finally:
        balancer.close()
