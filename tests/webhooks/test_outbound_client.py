"""The outbound client's connections (registry/webhooks/outbound.py), against a raw loopback server
that shows which request came over which connection: keep-alive reuse, what is never reused, the
SSRF guard before any byte, bounded reading, cancellation, cookies and TLS."""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from registry.webhooks import (
    ForbiddenDestination,
    IPNetwork,
    OutboundCalls,
    OutboundClient,
    OutboundResponse,
    ProtocolViolation,
    WebhookTarget,
    call_webhook,
    make_guarded_client,
)
from tests.certs import write_self_signed
from tests.waiting import wait_until

from .conftest import LOOPBACK, RawServer, http_answer

ANSWER = b'{"content":[{"type":"text","text":"ok"}]}'
FLOOD_BYTES = 32 * 1024 * 1024
#: Answers framed in the other ways HTTP/1.1 allows, or not allowed, written as they are.
FRAMINGS = {
    "/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    "/continue": b"HTTP/1.1 100 Continue\r\n\r\n" + http_answer(ANSWER),
    "/until-close": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + ANSWER,
    "/huge-head": b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * 200_000 + b"\r\nContent-Length: 0\r\n\r\n",
    "/extra": http_answer(b"{}") + b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n",
    "/garbage": b"HTTP/1.1 two hundred\r\n\r\n",
}


class Upstream(RawServer):
    """Answers by path, keeping each connection open for the next request unless told otherwise."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(Upstream._route, tls=tls)
        self.cookie_headers = 0
        self.flood_sent = 0
        #: Set when a flood's writes have to wait: the client stopped reading.
        self.flood_held_back = threading.Event()
        #: Set once ``/close`` has closed its connection.
        self.closed = threading.Event()
        self.barrier: asyncio.Barrier | None = None

    @staticmethod
    async def _route(srv: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int) -> None:
        assert isinstance(srv, Upstream)
        while True:
            head = await srv.read_request(reader, index)
            path = srv.paths[index][-1]
            srv.cookie_headers += b"\r\ncookie:" in head.lower()
            if head.startswith(b"HEAD "):  # the head a GET would get, no body
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(ANSWER))
            elif path in FRAMINGS:
                writer.write(FRAMINGS[path])
                if path == "/until-close":
                    return
            elif path == "/together":  # eight at a time: answered once all eight have arrived
                if srv.barrier is None:
                    srv.barrier = asyncio.Barrier(8)
                await srv.barrier.wait()
                writer.write(http_answer(ANSWER))
            elif path == "/hold":
                await srv.hold()
                writer.write(http_answer(ANSWER))
            elif path == "/flood":  # 32 MB, written only as fast as the client reads it
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % FLOOD_BYTES)
                piece = b"f" * 65536
                while srv.flood_sent < FLOOD_BYTES:
                    writer.write(piece)
                    srv.flood_sent += len(piece)
                    if writer.transport.get_write_buffer_size() >= len(piece):  # the kernel took none of it
                        srv.flood_held_back.set()
                    await writer.drain()
            else:
                body = b"x" * 1_000_000 if path == "/big" else ANSWER
                cookie = b"Set-Cookie: session=agent-a; Path=/\r\n" if path == "/cookie" else b""
                writer.write(http_answer(body, headers=b"Content-Type: application/json\r\n" + cookie))
            await writer.drain()
            if path == "/close":  # no "Connection: close": the client finds out on its own
                writer.close()
                await writer.wait_closed()
                srv.closed.set()
                return


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream() as server:
        yield server


def guarded(allowed: Iterable[IPNetwork] = LOOPBACK, **options: Any) -> OutboundClient:
    return make_guarded_client(allowed, timeout=5.0, **options)


async def send(client: OutboundClient, method: str, url: str, content: bytes = b"") -> OutboundResponse:
    """One exchange, its body read to the end (so the connection can go back to the pool)."""
    async with client.stream(method, url, content=content) as response:
        await response.aread()
        return response


async def test_sequential_calls_reuse_one_connection(upstream: Upstream) -> None:
    async with guarded() as client:
        for _ in range(5):
            result = await call_webhook(WebhookTarget(url=upstream.url("/hook"), secret="s"), {"a": 1}, client=client)
            assert result["isError"] is False
    assert upstream.paths == [["/hook"] * 5]


async def test_concurrent_calls_open_one_connection_each_then_reuse_them(upstream: Upstream) -> None:
    async with guarded() as client:
        for _ in range(3):
            answers = await asyncio.gather(*(send(client, "POST", upstream.url("/together"), b"{}") for _ in range(8)))
            assert [a.status_code for a in answers] == [200] * 8
    # Eight at a time need eight connections, and the later bursts found them idle.
    assert sorted(len(paths) for paths in upstream.paths) == [3] * 8


async def test_a_connection_the_server_closed_is_not_reused(upstream: Upstream) -> None:
    async with guarded() as client:
        assert (await send(client, "POST", upstream.url("/close"), b"{}")).status_code == 200
        assert await asyncio.to_thread(upstream.closed.wait, 10)  # its FIN is in while the connection is idle
        assert (await send(client, "POST", upstream.url("/after"), b"{}")).status_code == 200
    assert upstream.paths == [["/close"], ["/after"]]


async def test_connections_are_never_shared_between_origins(upstream: Upstream) -> None:
    with Upstream() as other:
        async with guarded() as client:
            for _ in range(3):
                await send(client, "GET", upstream.url("/a"))
                await send(client, "GET", other.url("/b"))
                # Same socket address, other host name: another origin, so another connection.
                await send(client, "GET", upstream.url("/c", host="localhost"))
    assert other.paths == [["/b"] * 3]
    assert sorted(upstream.paths) == [["/a"] * 3, ["/c"] * 3]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"])
async def test_a_refused_destination_is_not_even_connected_to(upstream: Upstream, host: str) -> None:
    # An IP literal is refused by the socket factory, a name by the resolver: before a TCP handshake.
    async with guarded(()) as client:
        for _ in range(2):  # nothing refused is pooled: the second try is checked again
            with pytest.raises(ForbiddenDestination) as info:
                await send(client, "POST", upstream.url("/hook", host=host), b"{}")
            assert info.value.address is not None and info.value.reason == "loopback"
            assert info.value.host == host.strip("[]")
    assert upstream.connections == 0


async def test_a_response_closed_before_its_end_closes_its_connection(upstream: Upstream) -> None:
    async with guarded() as client:
        async with client.stream("GET", upstream.url("/big")) as response:
            async for _ in response.aiter_raw():
                break
        assert (await send(client, "GET", upstream.url("/next"))).status_code == 200
    assert upstream.paths == [["/big"], ["/next"]]


async def test_a_reader_that_stalls_holds_the_server_back(upstream: Upstream) -> None:
    # The client stops reading the socket past a bound, so TCP flow control stops the server: memory
    # holds what the kernels buffer, not what the server can send while the caller is busy.
    async with guarded() as client, client.stream("GET", upstream.url("/flood")) as response:
        async for _ in response.aiter_raw():
            # A busy caller (relaying progress to a slow client, say): the server must be held back.
            assert await asyncio.to_thread(upstream.flood_held_back.wait, 10)
            break
    assert 0 < upstream.flood_sent < FLOOD_BYTES // 2


async def test_a_cancelled_call_closes_its_connection_and_frees_its_place(upstream: Upstream) -> None:
    calls = OutboundCalls()
    async with guarded(calls=calls) as client:
        task = asyncio.create_task(send(client, "GET", upstream.url("/hold")))
        await asyncio.to_thread(wait_until, lambda: upstream.held == 1, "the call to reach the server")
        assert calls.in_flight() == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert calls.in_flight() == 0
        assert (await send(client, "GET", upstream.url("/next"))).status_code == 200
    upstream.open_gate()
    assert upstream.paths == [["/hold"], ["/next"]]


async def test_cookies_set_by_a_webhook_are_not_sent_on_later_calls(upstream: Upstream) -> None:
    # One client serves every agent: a kept cookie would carry one agent's session into another's call.
    async with guarded() as client:
        first = await send(client, "POST", upstream.url("/cookie"), b"{}")
        assert first.headers["set-cookie"].startswith("session=")
        for _ in range(2):
            result = await call_webhook(WebhookTarget(url=upstream.url("/cookie")), {}, client=client)
            assert result["isError"] is False
    assert upstream.cookie_headers == 0


# --------------------------------------------------------------------------- framing


async def test_chunked_and_informational_answers_are_read_and_their_connection_reused(upstream: Upstream) -> None:
    async with guarded() as client:
        async with client.stream("GET", upstream.url("/chunked")) as response:
            assert await response.aread() == b"hello world"
        async with client.stream("POST", upstream.url("/continue"), content=b"{}") as response:
            assert response.status_code == 200 and await response.aread() == ANSWER
        assert (await send(client, "GET", upstream.url("/after"))).status_code == 200
    assert upstream.paths == [["/chunked", "/continue", "/after"]]


async def test_a_body_that_ends_with_its_connection_is_read_whole_and_not_reused(upstream: Upstream) -> None:
    async with guarded() as client:
        async with client.stream("GET", upstream.url("/until-close")) as response:
            assert await response.aread() == ANSWER
        assert (await send(client, "GET", upstream.url("/next"))).status_code == 200
    assert upstream.paths == [["/until-close"], ["/next"]]


async def test_a_head_answer_ends_at_its_headers(upstream: Upstream) -> None:
    async with guarded() as client:
        async with client.stream("HEAD", upstream.url("/hook")) as response:
            assert response.status_code == 200
            assert response.headers["content-length"] == str(len(ANSWER))
            assert await response.aread() == b""
        assert (await send(client, "GET", upstream.url("/next"))).status_code == 200
    assert upstream.paths == [["/hook", "/next"]]


async def test_bytes_after_an_answer_keep_its_connection_out_of_the_pool(upstream: Upstream) -> None:
    async with guarded() as client:
        async with client.stream("GET", upstream.url("/extra")) as response:
            assert response.status_code == 200  # the 408 that followed in the same read is not the answer
            assert await response.aread() == b"{}"
        assert (await send(client, "GET", upstream.url("/next"))).status_code == 200
    assert upstream.paths == [["/extra"], ["/next"]]


@pytest.mark.parametrize("path", ["/huge-head", "/garbage"])
async def test_an_oversized_or_invalid_answer_is_a_protocol_error(upstream: Upstream, path: str) -> None:
    async with guarded() as client:
        with pytest.raises(ProtocolViolation):
            await send(client, "GET", upstream.url(path))
        assert (await send(client, "GET", upstream.url("/next"))).status_code == 200
    assert upstream.paths == [[path], ["/next"]]


# --------------------------------------------------------------------------- TLS


async def test_https_is_verified_pooled_and_guarded_before_the_tls_hello(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    write_self_signed(cert, key, host="127.0.0.1")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    with Upstream(tls=server_context) as tls:
        trusted = ssl.create_default_context(cafile=str(cert))
        async with guarded(verify=trusted) as client:
            for _ in range(3):
                result = await call_webhook(WebhookTarget(url=tls.url("/tls")), {}, client=client)
                assert result["isError"] is False
        assert tls.paths == [["/tls"] * 3]

        async with guarded() as untrusting:  # the system's CAs do not know it
            result = await call_webhook(WebhookTarget(url=tls.url("/untrusted")), {}, client=untrusting)
        assert result == {
            "content": [
                {
                    "type": "text",
                    "text": "could not connect to webhook host '127.0.0.1': its TLS certificate could not be verified",
                }
            ],
            "isError": True,
        }

        before = tls.connections
        async with guarded((), verify=trusted) as strict:
            result = await call_webhook(WebhookTarget(url=tls.url("/refused")), {}, client=strict)
        assert result["isError"] is True and "refusing to connect" in result["content"][0]["text"]
        assert tls.connections == before, "a refused destination gets no TCP handshake, let alone a TLS hello"
