"""The webhook client's HTTP/1.1 framing and reuse decisions (registry/webhooks/outbound.py), against
raw loopback servers that answer byte for byte what each test needs: what a hostile or broken
upstream can send (a second answer in one read, trailers, oversized heads, resets, odd codings),
and what the client must send (the A-label host, the URL's credentials, no control characters)."""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

import pytest

from registry.webhooks import (
    ConnectionLost,
    InvalidRequest,
    OutboundClient,
    ProtocolViolation,
    WebhookTarget,
    call_webhook,
    make_guarded_client,
)

from .conftest import LOOPBACK, RawServer, http_answer


def guarded() -> OutboundClient:
    return make_guarded_client(LOOPBACK, timeout=2.0)


async def serve_forever(
    server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int
) -> None:
    """Answers every request on the connection with ``{}``."""
    while True:
        await server.read_request(reader, index)
        writer.write(http_answer(b"{}"))
        await writer.drain()


# --- a second message in the same read does not replace the first's status and headers
async def test_a_second_answer_in_the_same_read_does_not_replace_the_first() -> None:
    with RawServer.answering(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\nX-First: 1\r\n\r\n{}"
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Second: 1\r\n\r\n"
    ) as srv:
        async with guarded() as c:
            async with c.stream("GET", srv.url()) as response:
                body = await response.aread()
            assert (response.status_code, "x-first" in response.headers, body) == (500, True, b"{}")
            async with c.stream("GET", srv.url()) as response:  # and it is not the next call's answer
                assert response.status_code == 500
    assert srv.connections == 2


# --- chunked trailers must not become response headers
async def test_trailer_fields_are_not_merged_into_the_headers() -> None:
    with RawServer.answering(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
        b"2;ext=1\r\n{}\r\n0\r\nContent-Type: application/x-ndjson\r\nX-Trailer: t\r\n\r\n"
    ) as srv:
        async with guarded() as c, c.stream("GET", srv.url()) as response:
            assert await response.aread() == b"{}"
            assert "x-trailer" not in response.headers
            assert response.headers["content-type"] == "application/json"


# --- the head's bounds: a status line or a header field past 8190 bytes, more than 128 header lines
@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 " + b"o" * 9000 + b"\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * 150_000 + b"\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: v\r\n" % n for n in range(129)) + b"Content-Length: 0\r\n\r\n",
    ],
    ids=["status-line", "one-field", "header-count"],
)
async def test_a_head_past_its_bounds_is_a_protocol_error(head: bytes) -> None:
    with RawServer.answering(head) as srv:
        async with guarded() as c:
            with pytest.raises(ProtocolViolation):
                async with c.stream("GET", srv.url()) as response:
                    await response.aread()


# --- a reset in the middle of a close-delimited body is an error, not the body's end
@pytest.mark.parametrize(
    "answer",
    [
        b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"partial": ',
        b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"partial": ',
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nc\r\n{"partial": \r\n',
    ],
    ids=["until-close", "content-length", "chunked"],
)
async def test_a_reset_mid_body_is_a_lost_connection(answer: bytes) -> None:
    async def handler(srv: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int) -> None:
        await srv.read_request(reader, index)
        writer.write(answer)
        await writer.drain()
        await srv.hold()  # until the client has the first bytes
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    with RawServer(handler) as srv:
        async with guarded() as c:
            with pytest.raises(ConnectionLost):
                async with c.stream("GET", srv.url()) as response:
                    async for _ in response.aiter_raw():
                        srv.open_gate()
        async with guarded() as c:  # what an agent is told: the reset, in words that name no address
            result = await call_webhook(WebhookTarget(url=srv.url()), {}, client=c)
    assert result["isError"] is True
    assert result["content"][0]["text"] == "webhook call to '127.0.0.1' failed: connection reset by peer"


async def test_a_body_cut_short_by_a_close_is_a_protocol_error() -> None:
    with RawServer.answering(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"partial": ', hold=False) as srv:
        async with guarded() as c:
            result = await call_webhook(WebhookTarget(url=srv.url()), {}, client=c)
    assert result["content"][0]["text"] == "webhook call to '127.0.0.1' failed: the server broke the HTTP protocol"


# --- an answer that breaks HTTP after its head ends the body's reading at once (aiohttp alone would wait)
@pytest.mark.parametrize(
    "tail",
    [b"ZZ\r\n", b"3\r\nabcXX", b"0\r\nX-Trailer: " + b"t" * 10_000, b"0\r\nno colon\r\n\r\n"],
    ids=["chunk-size", "chunk-end", "endless-trailer", "bad-trailer"],
)
async def test_an_answer_broken_after_its_head_fails_the_body_at_once(tail: bytes) -> None:
    async def handler(srv: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int) -> None:
        await srv.read_request(reader, index)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n")
        await writer.drain()
        await srv.hold()  # until the client has the head: what follows comes in a later read
        writer.write(tail)
        await writer.drain()
        await reader.read()  # the connection stays open: only the client can end this

    with RawServer(handler) as srv:
        async with make_guarded_client(LOOPBACK, timeout=60.0) as c, c.stream("GET", srv.url()) as response:
            srv.open_gate()
            async with asyncio.timeout(30):  # (a failure here is the bug: the body waited for ever)
                with pytest.raises(ProtocolViolation):
                    await response.aread()


# --- 204/304 with a Content-Length, then reuse
@pytest.mark.parametrize("status", [b"204 No Content", b"304 Not Modified"])
async def test_no_body_statuses_end_at_their_head_and_are_reused(status: bytes) -> None:
    async def handler(srv: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int) -> None:
        await srv.read_request(reader, index)
        writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 5\r\n\r\n")
        await writer.drain()
        await serve_forever(srv, reader, writer, index)

    with RawServer(handler) as srv:
        async with guarded() as c:
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
    with RawServer.answering(answer) as srv:
        async with guarded() as c:
            for _ in range(2):
                async with c.stream("GET", srv.url()) as response:
                    assert await response.aread() == b"{}"
    assert srv.connections == 2


# --- Transfer-Encoding other than chunked: body until close
async def test_non_chunked_transfer_encoding_reads_until_close() -> None:
    with RawServer.answering(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n{}", hold=False) as srv:
        async with guarded() as c, c.stream("GET", srv.url()) as response:
            assert await response.aread() == b"{}"  # RFC 9112 6.3: no final chunked coding: until close


# --- the host connected to (and named to TLS) is the URL's IDNA-2008 A-label, as httpx and the save-time check spell it
async def test_an_internationalized_host_is_resolved_by_its_a_label(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Any] = []
    real = socket.getaddrinfo

    def fake(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append(host.encode("idna") if isinstance(host, str) else host)  # what the resolver is sent
        return real("127.0.0.1", port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    with RawServer.answering(http_answer(b"{}")) as srv:
        for url in (f"http://xn--fa-hia.de:{srv.port}/", f"http://faß.de:{srv.port}/"):
            async with guarded() as c, c.stream("GET", url) as response:
                await response.aread()
    assert all(b"Host: xn--fa-hia.de:" in head for head in srv.heads)
    assert asked == [b"xn--fa-hia.de"] * 2  # not b"fass.de", another domain


# --- a host httpx accepts but Python's IDNA-2003 codec refuses must be an isError result, not an exception
async def test_a_host_the_idna_codec_refuses_is_an_error_result(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str):
            host.encode("idna")  # what socket.getaddrinfo does first (UnicodeError for this host)
        raise socket.gaierror(socket.EAI_NONAME, "no such host")  # no real DNS in a test

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    async with guarded() as c:
        result = await call_webhook(WebhookTarget(url="http://xn--1-zhcd.example/hook"), {}, client=c)
    assert result["isError"] is True
    assert result["content"][0]["text"].endswith(": the host name does not resolve")


# --- an on_response hook that raises closes the response and frees the call's place under the caps
async def test_a_failing_on_response_hook_frees_the_call() -> None:
    with RawServer(serve_forever) as srv:
        async with guarded() as c:

            def boom(response: Any) -> None:
                raise ValueError("hook")

            c.on_response = boom
            with pytest.raises(ValueError):
                async with c.stream("GET", srv.url(), caller="token:1"):
                    pass
            assert c.calls.in_flight(caller="token:1") == 0
            c.on_response = None
            async with c.stream("GET", srv.url()) as response:
                assert await response.aread() == b"{}"


# --- credentials in the URL's userinfo go as Basic authorization (as httpx sent them)
async def test_credentials_in_the_url_are_sent_as_basic_authorization() -> None:
    with RawServer(serve_forever) as srv:
        async with guarded() as c:
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
    assert b"user:" not in with_userinfo and b"#frag" not in with_userinfo


# --- header values and methods that could split the request, or carry control characters, are refused unsent
async def test_a_header_or_method_that_cannot_be_sent_is_refused_unsent() -> None:
    with RawServer(serve_forever) as srv:
        async with guarded() as c:
            for value in ("a\x0bb", "a\x7fb", "a\x00b", "s3cret\r\nX-Evil: 1", "caf\u00e9"):
                with pytest.raises(InvalidRequest, match="X-Token") as info:
                    async with c.stream("GET", srv.url(), headers=[("X-Token", value)]):
                        pass
                assert value not in str(info.value)
            with pytest.raises(InvalidRequest, match="invalid request method"):
                async with c.stream("GET /x HTTP/1.1\r\nX:", srv.url()):
                    pass
    assert srv.heads == [] and srv.connections == 0


# --- a 1xx after the final answer (same read) keeps the connection out of the pool
async def test_an_informational_answer_after_the_final_one_is_unexpected() -> None:
    with RawServer.answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 100 Continue\r\n\r\n") as srv:
        async with guarded() as c:
            for _ in range(2):
                async with c.stream("GET", srv.url()) as response:
                    assert await response.aread() == b"{}"
    assert srv.connections == 2
