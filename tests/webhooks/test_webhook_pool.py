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
from registry.webhooks.pool import ConnectionPool, PooledClient, PooledResponse, Timeouts
from tests.certs import write_self_signed

LOOPBACK = parse_networks("127.0.0.0/8,::1/128")
ANSWER = b'{"content":[{"type":"text","text":"ok"}]}'
FLOOD_BYTES = 32 * 1024 * 1024
#: Answers framed in the other ways HTTP/1.1 allows, or not allowed, written as they are.
FRAMINGS = {
    "/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    "/continue": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
    % (len(ANSWER), ANSWER),
    "/until-close": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + ANSWER,
    "/huge-head": b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * 200_000 + b"\r\nContent-Length: 0\r\n\r\n",
    "/extra": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    + b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n",
    "/garbage": b"HTTP/1.1 two hundred\r\n\r\n",
}


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
                if lines[0].startswith("HEAD "):  # the head a GET would get, no body
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(ANSWER))
                    await writer.drain()
                    continue
                if path in FRAMINGS:
                    writer.write(FRAMINGS[path])
                    await writer.drain()
                    if path == "/until-close":
                        return
                    continue
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


def pooled_client(guard: Any = None, timeout: Timeouts = 5.0, **pool: Any) -> PooledClient:
    return PooledClient(ConnectionPool(guard or ConnectedPeerGuard(LOOPBACK), **pool), timeout=timeout)


async def send(
    client: PooledClient, method: str, url: str, content: bytes = b"", timeout: Timeouts = None
) -> PooledResponse:
    """One exchange, its body read to the end (so the connection can go back to the pool)."""
    async with client.stream(method, url, content=content, timeout=timeout) as response:
        await response.aread()
        return response


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
            answers = await asyncio.gather(*(send(client, "POST", server.url("/slow"), b"{}") for _ in range(8)))
            assert [a.status_code for a in answers] == [200] * 8
    # Eight at a time need eight connections, and the later bursts found them idle.
    assert len(server.connections) == 8
    assert sorted(len(paths) for paths in server.connections) == [3] * 8
    assert guard.calls == 8, "the guard runs once per new connection"


async def test_a_connection_the_server_closed_is_not_reused(server: Server) -> None:
    async with pooled_client() as client:
        assert (await send(client, "POST", server.url("/close"), b"{}")).status_code == 200
        await asyncio.sleep(0.05)  # the server's FIN arrives while the connection is idle
        assert (await send(client, "POST", server.url("/after"), b"{}")).status_code == 200
    assert server.connections == [["/close"], ["/after"]]


async def test_connections_are_never_shared_between_origins(server: Server) -> None:
    other = Server()
    await other.start()
    try:
        async with pooled_client() as client:
            for _ in range(3):
                await send(client, "GET", server.url("/a"))
                await send(client, "GET", other.url("/b"))
                # Same socket address, other host name: another origin, so another connection.
                await send(client, "GET", server.url("/c", host="localhost"))
    finally:
        await other.stop()
    assert other.connections == [["/b"] * 3]
    assert sorted(server.connections) == [["/a"] * 3, ["/c"] * 3]


async def test_a_refused_connection_sends_nothing(server: Server) -> None:
    guard = CountingGuard(allowed=())
    async with pooled_client(guard) as client:
        for _ in range(2):  # a refused connection is not pooled: the second try is checked again
            with pytest.raises(ForbiddenDestination):
                await send(client, "POST", server.url("/hook"), b"{}")
    await asyncio.sleep(0.05)
    assert guard.calls == 2
    assert server.raw_bytes == 0 and all(paths == [] for paths in server.connections)


async def test_a_response_closed_before_its_end_closes_its_connection(server: Server) -> None:
    async with pooled_client() as client:
        async with client.stream("GET", server.url("/big")) as response:
            async for _ in response.aiter_raw():
                break
        assert (await send(client, "GET", server.url("/next"))).status_code == 200
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
        task = asyncio.create_task(send(client, "GET", server.url("/slow")))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await send(client, "GET", server.url("/next"))).status_code == 200
    assert server.connections == [["/slow"], ["/next"]]


async def test_calls_beyond_max_connections_wait_for_a_slot_up_to_the_pool_timeout(server: Server) -> None:
    async with pooled_client(max_connections=1) as client:
        slow = asyncio.create_task(send(client, "GET", server.url("/slow")))
        await asyncio.sleep(0.05)
        with pytest.raises(httpx.PoolTimeout):
            await send(client, "GET", server.url("/late"), timeout=httpx.Timeout(5.0, pool=0.05))
        waiting = asyncio.create_task(send(client, "GET", server.url("/queued")))
        assert (await slow).status_code == 200 and (await waiting).status_code == 200
    assert server.connections == [["/slow", "/queued"]]


async def test_idle_connections_expire_and_the_keepalive_cap_holds(server: Server) -> None:
    async with pooled_client(keepalive_expiry=0.05) as client:
        await send(client, "GET", server.url("/1"))
        await asyncio.sleep(0.1)
        await send(client, "GET", server.url("/2"))
    async with pooled_client(max_keepalive_connections=0) as client:
        await send(client, "GET", server.url("/3"))
        await send(client, "GET", server.url("/4"))
    assert server.connections == [["/1"], ["/2"], ["/3"], ["/4"]]


async def test_cookies_set_by_a_webhook_are_not_sent_on_later_calls(server: Server) -> None:
    # One client serves every agent: a kept cookie would carry one agent's session into another's call.
    async with make_guarded_client(LOOPBACK) as client:
        first = await send(client, "POST", server.url("/cookie"), b"{}")
        assert first.headers["set-cookie"].startswith("session=")
        for _ in range(2):
            result = await call_webhook(WebhookTarget(url=server.url("/cookie")), {}, client=client)
            assert result["isError"] is False
    assert server.cookie_headers == 0


# --------------------------------------------------------------------------- framing


async def test_chunked_and_informational_answers_are_read_and_their_connection_reused(server: Server) -> None:
    async with pooled_client() as client:
        async with client.stream("GET", server.url("/chunked")) as response:
            assert await response.aread() == b"hello world"
        async with client.stream("POST", server.url("/continue"), content=b"{}") as response:
            assert response.status_code == 200 and await response.aread() == ANSWER
        assert (await send(client, "GET", server.url("/after"))).status_code == 200
    assert server.connections == [["/chunked", "/continue", "/after"]]


async def test_a_body_that_ends_with_its_connection_is_read_whole_and_not_reused(server: Server) -> None:
    async with pooled_client() as client:
        async with client.stream("GET", server.url("/until-close")) as response:
            assert await response.aread() == ANSWER
        assert (await send(client, "GET", server.url("/next"))).status_code == 200
    assert server.connections == [["/until-close"], ["/next"]]


async def test_a_head_answer_ends_at_its_headers(server: Server) -> None:
    async with pooled_client() as client:
        async with client.stream("HEAD", server.url("/hook")) as response:
            assert response.status_code == 200
            assert response.headers["content-length"] == str(len(ANSWER))
            assert await response.aread() == b""
        assert (await send(client, "GET", server.url("/next"))).status_code == 200
    # The parser cannot be told a HEAD's answer has no body, so that connection is not reused.
    assert server.connections == [["/hook"], ["/next"]]


async def test_bytes_after_an_answer_keep_its_connection_out_of_the_pool(server: Server) -> None:
    async with pooled_client() as client:
        async with client.stream("GET", server.url("/extra")) as response:
            assert response.status_code == 200  # the 408 that followed in the same read is not the answer
            assert await response.aread() == b"{}"
        assert (await send(client, "GET", server.url("/next"))).status_code == 200
    assert server.connections == [["/extra"], ["/next"]]


@pytest.mark.parametrize(
    ("path", "fragment"), [("/huge-head", "larger than 102400 bytes"), ("/garbage", "invalid HTTP response")]
)
async def test_an_oversized_or_invalid_answer_is_a_protocol_error(server: Server, path: str, fragment: str) -> None:
    async with pooled_client() as client:
        with pytest.raises(httpx.RemoteProtocolError, match=fragment):
            await send(client, "GET", server.url(path))
        assert (await send(client, "GET", server.url("/next"))).status_code == 200
    assert server.connections == [[path], ["/next"]]


async def test_a_header_that_could_split_the_request_is_refused_unsent(server: Server) -> None:
    async with pooled_client() as client:
        with pytest.raises(httpx.LocalProtocolError) as info:
            async with client.stream("POST", server.url("/hook"), headers=[("X-Token", "s3cret\r\nX-Evil: 1")]):
                pass
    assert "s3cret" not in str(info.value)
    with pytest.raises(httpx.LocalProtocolError, match="invalid request method"):
        async with pooled_client() as client, client.stream("GET /x HTTP/1.1\r\nX:", server.url("/hook")):
            pass
    assert server.raw_bytes == 0


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
