"""The webhook client's HTTP/1.1 framing and reuse decisions (registry/webhooks/pool.py), against raw
loopback servers that answer byte for byte what each test needs: what a hostile or broken upstream
can send (a second answer in one read, trailers, oversized heads, resets, odd codings), and what the
client must send (the A-label host, the URL's credentials, no control characters)."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from registry.webhooks import ConnectedPeerGuard, WebhookTarget, call_webhook, parse_networks
from registry.webhooks.pool import ConnectionPool, PooledClient

LOOPBACK = parse_networks("127.0.0.0/8,::1/128")
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class Raw:
    """A server whose every connection runs ``handler(reader, writer, index)``; counts connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.heads: list[bytes] = []

    async def __aenter__(self) -> Raw:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = self.connections
        self.connections += 1
        try:
            await self.handler(reader, writer, index)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                await reader.readexactly(int(value))
        return head

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @classmethod
    def answering(cls, answer: bytes, *, hold: bool = True) -> Raw:
        """A server that answers each connection's first request with ``answer``, byte for byte, then
        holds the connection until the client closes it (``hold=False``: closes it at once)."""

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int) -> None:
            await server.read_request(reader)
            writer.write(answer)
            await writer.drain()
            if hold:
                await reader.read()

        server = cls(handler)
        return server


def client(**pool: Any) -> PooledClient:
    return PooledClient(ConnectionPool(ConnectedPeerGuard(LOOPBACK), **pool), timeout=2.0)


# --- a second message in the same read replaces the first's status and headers
async def test_a_second_answer_in_the_same_read_does_not_replace_the_first() -> None:
    async with (
        Raw.answering(
            b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\nX-First: 1\r\n\r\n{}"
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Second: 1\r\n\r\n"
        ) as srv,
        client() as c,
    ):
        async with c.stream("GET", srv.url()) as response:
            body = await response.aread()
        assert (response.status_code, "x-first" in response.headers, body) == (500, True, b"{}")


# --- chunked trailers must not become response headers
async def test_trailer_fields_are_not_merged_into_the_headers() -> None:
    async with (
        Raw.answering(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
            b"2;ext=1\r\n{}\r\n0\r\nContent-Type: application/x-ndjson\r\nX-Trailer: t\r\n\r\n"
        ) as srv,
        client() as c,
        c.stream("GET", srv.url()) as response,
    ):
        assert "x-trailer" not in response.headers
        assert response.headers["content-type"] == "application/json"
        assert await response.aread() == b"{}"


# --- the 100 KiB head bound holds when the whole head arrives in one read
@pytest.mark.parametrize("size", [150_000, 250_000])
async def test_a_head_over_the_bound_is_refused_even_in_one_read(size: int) -> None:
    async with (
        Raw.answering(b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * size + b"\r\nContent-Length: 0\r\n\r\n") as srv,
        client() as c,
    ):
        with pytest.raises(httpx.RemoteProtocolError, match="larger than"):
            async with c.stream("GET", srv.url()) as response:
                await response.aread()


# --- a reset in the middle of a close-delimited body is an error, not the body's end
async def test_a_reset_mid_close_delimited_body_is_an_error() -> None:
    async def handler(reader, writer, index):
        await srv.read_request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"partial": ')
        await writer.drain()
        await asyncio.sleep(0.2)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async with Raw(handler) as srv, client() as c:
        with pytest.raises(httpx.ReadError):
            async with c.stream("GET", srv.url()) as response:
                await response.aread()


# --- 204/304 with a Content-Length, then reuse
@pytest.mark.parametrize("status", [b"204 No Content", b"304 Not Modified"])
async def test_no_body_statuses_end_at_their_head_and_are_reused(status: bytes) -> None:
    async def handler(reader, writer, index):
        await srv.read_request(reader)
        writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 5\r\n\r\n")
        await writer.drain()
        await srv.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        await reader.read()

    async with Raw(handler) as srv, client() as c:
        async with c.stream("GET", srv.url()) as response:
            assert await response.aread() == b""
        async with c.stream("GET", srv.url()) as response:
            assert await response.aread() == b"{}"
    assert srv.connections == 1


# --- an HTTP/1.0 answer without keep-alive is not reused; with Connection: close neither
@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}",
    ],
)
async def test_answers_that_refuse_keep_alive_are_not_reused(answer: bytes) -> None:
    # The server holds each connection open: that the client does not reuse it is its own decision.
    async with Raw.answering(answer) as srv, client() as c:
        for _ in range(2):
            async with c.stream("GET", srv.url()) as response:
                assert await response.aread() == b"{}"
    assert srv.connections == 2


# --- Transfer-Encoding other than chunked: body until close
async def test_non_chunked_transfer_encoding_reads_until_close() -> None:
    async with (
        Raw.answering(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n{}", hold=False) as srv,
        client() as c,
        c.stream("GET", srv.url()) as response,
    ):
        assert await response.aread() == b"{}"  # RFC 9112 6.3: no final chunked coding: until close


# --- the host connected to (and named to TLS) is the URL's IDNA-2008 A-label, as httpx and the save-time check spell it
async def test_an_internationalized_host_is_resolved_by_its_a_label(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[bytes] = []
    real = socket.getaddrinfo

    def fake(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append(host.encode("idna") if isinstance(host, str) else host)  # what the resolver is sent
        return real("127.0.0.1", port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    async with (
        Raw.answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}") as srv,
        client() as c,
        c.stream("GET", f"http://xn--fa-hia.de:{srv.port}/") as response,
    ):
        await response.aread()
    assert b"Host: xn--fa-hia.de:" in srv.heads[0]
    assert asked == [b"xn--fa-hia.de"]  # not b"fass.de", another domain


# --- a host httpx accepts but Python's IDNA-2003 codec refuses must be an isError result, not an exception
async def test_a_host_the_idna_codec_refuses_is_an_error_result(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str):
            host.encode("idna")  # what socket.getaddrinfo does first (UnicodeError for this host)
        raise socket.gaierror(socket.EAI_NONAME, "no such host")  # no real DNS in a test

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    async with client() as c:
        result = await call_webhook(WebhookTarget(url="http://xn--1-zhcd.example/hook"), {}, client=c)
    assert result["isError"] is True


# --- an on_response hook that raises must not leak the slot
async def test_a_failing_on_response_hook_frees_the_slot() -> None:
    async def handler(reader, writer, index):
        while True:
            await srv.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()

    async with Raw(handler) as srv, client(max_connections=1) as c:

        def boom(response: Any) -> None:
            raise ValueError("hook")

        c.on_response = boom
        with pytest.raises(ValueError):
            async with c.stream("GET", srv.url()):
                pass
        c.on_response = None
        async with c.stream("GET", srv.url(), timeout=httpx.Timeout(2.0, pool=0.5)) as response:
            assert await response.aread() == b"{}"


# --- credentials in the URL's userinfo go as Basic authorization (as httpx sent them)
async def test_credentials_in_the_url_are_sent_as_basic_authorization() -> None:
    async def handler(reader, writer, index):
        while True:
            await srv.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()

    async with Raw(handler) as srv, client() as c:
        url = f"http://user:p%40ss@127.0.0.1:{srv.port}/p?q=1#frag"
        async with c.stream("GET", url, headers=[("Authorization", "Bearer configured")]) as response:
            await response.aread()
        async with c.stream("GET", srv.url("/plain"), headers=[("Authorization", "Bearer configured")]) as response:
            await response.aread()
    with_userinfo, plain = (head.lower() for head in srv.heads)
    assert with_userinfo.startswith(b"get /p?q=1 http/1.1\r\n")
    assert with_userinfo.count(b"authorization:") == 1  # the URL's credentials replace the configured ones
    assert b"authorization: basic dxnlcjpwqhnz\r\n" in with_userinfo  # base64("user:p@ss"), lower-cased
    assert b"authorization: bearer configured\r\n" in plain


async def test_a_header_value_with_a_control_character_is_refused_unsent() -> None:
    async def handler(reader, writer, index):
        await srv.read_request(reader)

    async with Raw(handler) as srv, client() as c:
        for value in ("a\x0bb", "a\x7fb", "a\x00b"):
            with pytest.raises(httpx.LocalProtocolError, match="X-Token"):
                async with c.stream("GET", srv.url(), headers=[("X-Token", value)]):
                    pass
    assert srv.heads == []


# --- a head over 100 KiB that arrives in one read is refused too
async def test_a_head_over_the_bound_in_a_single_read_is_refused() -> None:
    async with (
        Raw.answering(b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * 120_000 + b"\r\nContent-Length: 0\r\n\r\n") as srv,
        client() as c,
    ):
        exchange = c.stream("GET", srv.url())
        task = asyncio.create_task(exchange.__aenter__())
        while not srv.heads:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.01)
        time.sleep(0.2)  # the loop is busy while the whole head arrives: the client reads it at once
        with pytest.raises(httpx.RemoteProtocolError, match="larger than"):
            await task


# --- a 1xx after the final answer (same read) keeps the connection out of the pool
async def test_an_informational_answer_after_the_final_one_is_unexpected() -> None:
    async with (
        Raw.answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 100 Continue\r\n\r\n") as srv,
        client() as c,
    ):
        for _ in range(2):
            async with c.stream("GET", srv.url()) as response:
                assert await response.aread() == b"{}"
    assert srv.connections == 2
