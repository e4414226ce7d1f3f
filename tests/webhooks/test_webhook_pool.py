"""The webhook transport's keep-alive pool (registry/webhooks/pool.py), against real loopback servers.

The server here is a small asyncio HTTP/1.1 server written for these tests, so each test can see
how many connections the client opened, which requests came over which connection, and can close
a connection or stall an answer on purpose.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from registry.webhooks import (
    ConnectedPeerGuard,
    ForbiddenDestination,
    WebhookTarget,
    call_webhook,
    make_guarded_client,
    parse_networks,
)
from registry.webhooks.pool import PooledTransport
from tests.certs import write_self_signed

LOOPBACK = parse_networks("127.0.0.0/8,::1/128")
ANSWER = b'{"content":[{"type":"text","text":"ok"}]}'
FLOOD_BYTES = 32 * 1024 * 1024


@dataclass
class Server:
    """What the server saw: one entry per connection, listing the paths requested over it."""

    port: int = 0
    connections: list[list[str]] = field(default_factory=list)
    raw_bytes: int = 0
    cookie_headers: int = 0
    flood_sent: int = 0
    tls: ssl.SSLContext | None = None
    _server: asyncio.Server | None = None
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}{path}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        paths: list[str] = []
        self.connections.append(paths)
        self._writers.append(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                    return
                self.raw_bytes += len(head)
                self.cookie_headers += b"\r\ncookie:" in head.lower()
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                length = next(
                    (int(v) for k, _, v in (ln.partition(":") for ln in lines[1:]) if k.lower() == "content-length"),
                    0,
                )
                await reader.readexactly(length)
                paths.append(path)
                if path == "/slow":
                    await asyncio.sleep(0.3)
                if path == "/flood":  # 32 MB, written only as fast as the client reads it
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % FLOOD_BYTES)
                    piece = b"f" * 65536
                    while self.flood_sent < FLOOD_BYTES:
                        writer.write(piece)
                        self.flood_sent += len(piece)
                        await writer.drain()
                    continue
                body = b"x" * 1_000_000 if path == "/big" else ANSWER
                cookie = b"Set-Cookie: session=agent-a; Path=/\r\n" if path == "/cookie" else b""
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + cookie
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
                if path == "/close":  # no "Connection: close": the client finds out on its own
                    return
        finally:
            writer.close()


@pytest_asyncio.fixture
async def server() -> AsyncIterator[Server]:
    s = Server()
    await s.start()
    yield s
    await s.stop()


class CountingGuard:
    """The real guard, counting the connections it was asked about."""

    def __init__(self, allowed: Any = LOOPBACK) -> None:
        self.inner = ConnectedPeerGuard(allowed)
        self.calls = 0

    def __call__(self, host: str, peer: Any) -> None:
        self.calls += 1
        self.inner(host, peer)


def pooled_client(guard: Any = None, timeout: float | httpx.Timeout = 5.0, **pool: Any) -> httpx.AsyncClient:
    transport = PooledTransport(guard or ConnectedPeerGuard(LOOPBACK), **pool)
    return httpx.AsyncClient(transport=transport, timeout=timeout, follow_redirects=False, trust_env=False)


async def test_sequential_calls_reuse_one_connection(server: Server) -> None:
    async with make_guarded_client(LOOPBACK) as client:
        for _ in range(5):
            result = await call_webhook(WebhookTarget(url=server.url("/hook"), secret="s"), {"a": 1}, client=client)
            assert result["isError"] is False
    assert server.connections == [["/hook"] * 5]


async def test_concurrent_calls_open_one_connection_each_then_reuse_them(server: Server) -> None:
    guard = CountingGuard()
    async with pooled_client(guard) as client:
        for _ in range(3):
            answers = await asyncio.gather(*(client.post(server.url("/slow"), content=b"{}") for _ in range(8)))
            assert [a.status_code for a in answers] == [200] * 8
    # Eight at a time need eight connections, and the later bursts found them idle.
    assert len(server.connections) == 8
    assert sorted(len(paths) for paths in server.connections) == [3] * 8
    assert guard.calls == 8, "the guard runs once per new connection"


async def test_a_connection_the_server_closed_is_not_reused(server: Server) -> None:
    async with pooled_client() as client:
        assert (await client.post(server.url("/close"), content=b"{}")).status_code == 200
        await asyncio.sleep(0.05)  # the server's FIN arrives while the connection is idle
        assert (await client.post(server.url("/after"), content=b"{}")).status_code == 200
    assert server.connections == [["/close"], ["/after"]]


async def test_connections_are_never_shared_between_origins(server: Server) -> None:
    other = Server()
    await other.start()
    try:
        async with pooled_client() as client:
            for _ in range(3):
                await client.get(server.url("/a"))
                await client.get(other.url("/b"))
                # Same socket address, other host name: another origin, so another connection.
                await client.get(server.url("/c", host="localhost"))
    finally:
        await other.stop()
    assert other.connections == [["/b"] * 3]
    assert sorted(server.connections) == [["/a"] * 3, ["/c"] * 3]


async def test_a_refused_connection_sends_nothing(server: Server) -> None:
    guard = CountingGuard(allowed=())
    async with pooled_client(guard) as client:
        for _ in range(2):  # a refused connection is not pooled: the second try is checked again
            with pytest.raises(ForbiddenDestination):
                await client.post(server.url("/hook"), content=b"{}")
    await asyncio.sleep(0.05)
    assert guard.calls == 2
    assert server.raw_bytes == 0 and all(paths == [] for paths in server.connections)


async def test_a_response_closed_before_its_end_closes_its_connection(server: Server) -> None:
    async with pooled_client() as client:
        async with client.stream("GET", server.url("/big")) as response:
            async for _ in response.aiter_raw():
                break
        assert (await client.get(server.url("/next"))).status_code == 200
    assert server.connections == [["/big"], ["/next"]]


async def test_a_reader_that_stalls_holds_the_server_back(server: Server) -> None:
    # The pool stops reading the socket past a bound, so TCP flow control stops the server: memory
    # holds what the kernel buffers, not what the server can send while the caller is busy.
    async with pooled_client() as client, client.stream("GET", server.url("/flood")) as response:
        async for _ in response.aiter_raw():
            await asyncio.sleep(0.5)  # e.g. a slow client on the other end of a progress relay
            break
    assert 0 < server.flood_sent < FLOOD_BYTES // 2


async def test_a_cancelled_call_frees_its_slot_and_closes_its_connection(server: Server) -> None:
    async with pooled_client(max_connections=1) as client:
        task = asyncio.create_task(client.get(server.url("/slow")))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await client.get(server.url("/next"))).status_code == 200
    assert server.connections == [["/slow"], ["/next"]]


async def test_calls_beyond_max_connections_wait_for_a_slot_up_to_the_pool_timeout(server: Server) -> None:
    async with pooled_client(max_connections=1) as client:
        slow = asyncio.create_task(client.get(server.url("/slow")))
        await asyncio.sleep(0.05)
        with pytest.raises(httpx.PoolTimeout):
            await client.get(server.url("/late"), timeout=httpx.Timeout(5.0, pool=0.05))
        waiting = asyncio.create_task(client.get(server.url("/queued")))
        assert (await slow).status_code == 200 and (await waiting).status_code == 200
    assert server.connections == [["/slow", "/queued"]]


async def test_idle_connections_expire_and_the_keepalive_cap_holds(server: Server) -> None:
    async with pooled_client(keepalive_expiry=0.05) as client:
        await client.get(server.url("/1"))
        await asyncio.sleep(0.1)
        await client.get(server.url("/2"))
    async with pooled_client(max_keepalive_connections=0) as client:
        await client.get(server.url("/3"))
        await client.get(server.url("/4"))
    assert server.connections == [["/1"], ["/2"], ["/3"], ["/4"]]


async def test_cookies_set_by_a_webhook_are_not_sent_on_later_calls(server: Server) -> None:
    # One client serves every agent: a kept cookie would carry one agent's session into another's call.
    async with make_guarded_client(LOOPBACK) as client:
        first = await client.post(server.url("/cookie"), content=b"{}")
        assert first.headers["set-cookie"].startswith("session=")
        for _ in range(2):
            result = await call_webhook(WebhookTarget(url=server.url("/cookie")), {}, client=client)
            assert result["isError"] is False
        assert not client.cookies
    assert server.cookie_headers == 0


# --------------------------------------------------------------------------- TLS


async def test_https_is_verified_pooled_and_guarded_before_the_tls_hello(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    write_self_signed(cert, key, host="127.0.0.1")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    tls = Server(tls=server_context)
    await tls.start()
    try:
        trusted = ssl.create_default_context(cafile=str(cert))
        async with make_guarded_client(LOOPBACK, verify=trusted) as client:
            for _ in range(3):
                result = await call_webhook(WebhookTarget(url=tls.url("/tls")), {}, client=client)
                assert result["isError"] is False
        assert tls.connections == [["/tls"] * 3]

        async with make_guarded_client(LOOPBACK) as untrusting:  # the system's CAs do not know it
            result = await call_webhook(WebhookTarget(url=tls.url("/untrusted")), {}, client=untrusting)
        assert result["isError"] is True and "certificate" in result["content"][0]["text"]

        async with make_guarded_client((), verify=trusted) as strict:
            result = await call_webhook(WebhookTarget(url=tls.url("/refused")), {}, client=strict)
        assert result["isError"] is True and "refusing to connect" in result["content"][0]["text"]
        assert all("/refused" not in paths for paths in tls.connections)
    finally:
        await tls.stop()
