"""Request heads are bounded before anything else runs (issue 23, point 3).

uvicorn's httptools protocol gathers a request line and headers without a bound: one connection
sending a 64 MB header value held ``/healthz`` for 10.5 s, and 200 MB of small headers added
600 MB of RSS; a chunked body's trailers are gathered the same way. ``registry.serving.
HeadBoundProtocol`` counts every byte of a request that is not its body as it arrives and answers
431 (or closes) past ``REGISTRY_LIMIT_REQUEST_HEAD_BYTES``. The attacks run against a real
``mcp-registry serve`` process (the embedded default); ``tests/test_deploy.py`` repeats the two head
floods through the shipped nginx. How reads are cut is checked on the protocol itself, fed by hand
(a socket cannot choose where the server's reads end).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from registry.limits import DEFAULT_LIMITS
from registry.serving import bounded_heads
from tests.security.conftest import MiB, PeakRss, ResponsivenessProbe, ask_healthz, flood_head
from tests.serve_process import ServerProcess

HEAD_LIMIT = DEFAULT_LIMITS.request_head_bytes
START = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


def _exchange(server: ServerProcess, data: bytes, timeout: float = 30.0) -> bytes:
    """Send ``data`` (and nothing more) on one connection and read until the server closes it
    (requests that are served say ``Connection: close``, or end with one that is refused)."""
    received = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
        sock.sendall(data)
        while chunk := sock.recv(65536):
            received += chunk
    return received


def _get(headers: bytes, *, close: bool = True) -> bytes:
    """A GET of /healthz with ``headers`` (a block of header lines)."""
    return (
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + (b"Connection: close\r\n\r\n" if close else b"\r\n")
    )


def _header_block(size: int) -> bytes:
    """Headers of 100 bytes each (``X-Pad-N: aaa...``) making ``size`` bytes in all."""
    lines = []
    while size > 0:
        line = f"X-Pad-{len(lines)}: ".encode()
        line += b"a" * max(0, min(98, size) - len(line)) + b"\r\n"
        lines.append(line)
        size -= len(line)
    return b"".join(lines)


def _as_dict(block: bytes) -> dict[str, str]:
    pairs = (line.split(b": ", 1) for line in block.split(b"\r\n") if line)
    return {name.decode(): value.decode() for name, value in pairs}


@pytest.fixture(scope="module")
def small_heads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose heads are bounded at 4 KiB: the setting is what decides."""
    with ServerProcess(
        tmp_path_factory.mktemp("small-heads"), env={"REGISTRY_LIMIT_REQUEST_HEAD_BYTES": "4096"}, name="small-heads"
    ) as process:
        yield process


def test_a_64_mb_header_value_is_refused_while_others_are_served(server: ServerProcess) -> None:
    with PeakRss(server) as rss, ResponsivenessProbe(ask_healthz, server) as probe:
        flood = flood_head("127.0.0.1", server.port, start=START + b"X-Huge: ", piece=b"a" * 65536, total=64 * MiB)
    assert flood.sent < 16 * MiB, f"the server took {flood.sent / MiB:.0f} MiB of one head"
    assert flood.status in (None, 431), flood.answer[:200]  # the 431 may be cut off by the reset
    probe.assert_responsive()
    rss.assert_within(50 * MiB)


def test_200_mb_of_small_headers_are_refused_while_others_are_served(server: ServerProcess) -> None:
    piece = b"X-Small: 1\r\n" * 5000
    with PeakRss(server) as rss, ResponsivenessProbe(ask_healthz, server) as probe:
        flood = flood_head("127.0.0.1", server.port, start=START, piece=piece, total=200 * MiB)
    assert flood.sent < 16 * MiB, f"the server took {flood.sent / MiB:.0f} MiB of one head"
    assert flood.status in (None, 431), flood.answer[:200]
    probe.assert_responsive()
    rss.assert_within(50 * MiB)


def test_a_head_over_the_limit_is_answered_431_naming_the_limit(server: ServerProcess) -> None:
    answer = _exchange(server, START + _header_block(HEAD_LIMIT + 1000))
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"connection: close" in head.lower()
    assert body.decode() == f"Request head larger than {HEAD_LIMIT} bytes (limit REGISTRY_LIMIT_REQUEST_HEAD_BYTES)"


def test_a_long_request_line_is_refused_too(server: ServerProcess) -> None:
    answer = _exchange(server, b"GET /healthz?" + b"q" * (HEAD_LIMIT + 10) + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]


def test_a_head_within_the_limit_and_its_body_are_served(server: ServerProcess) -> None:
    """A head just under the bound is served, whatever size its body: only the head is counted,
    also when the body is sent in the same write as the head."""
    headers = _header_block(HEAD_LIMIT - 400)
    assert _exchange(server, _get(headers)).startswith(b"HTTP/1.1 200 ")
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "padding": "' + b"p" * (2 * MiB) + b'"}'
    request = (
        START
        + headers
        + b"Accept: application/json\r\nConnection: close\r\n"
        + f"Authorization: Bearer {server.admin_token}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    answer = _exchange(server, request)
    # Past the head check: the transport's own answer (no session), not a 431.
    assert answer.startswith(b"HTTP/1.1 400 ") and b"Mcp-Session-Id" in answer, answer[:300]


def test_each_request_of_a_keep_alive_connection_gets_the_whole_bound(server: ServerProcess) -> None:
    """The count starts again with each request: heads of most of the bound, pipelined in one
    write, are all served, and so are the next ones on the same connection, one at a time; a
    head over the bound that follows is refused, after the answers before it."""
    near = _header_block(HEAD_LIMIT - 200)
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(_get(near, close=False) * 3)
        received = b""
        for answered in (3, 4, 5):
            while received.count(b"HTTP/1.1 200 ") < answered:
                received += sock.recv(65536)
            if answered < 5:
                sock.sendall(_get(near, close=False))  # the next, once the one before is answered
        sock.sendall(_get(_header_block(HEAD_LIMIT + 200), close=False))
        while chunk := sock.recv(65536):
            received += chunk
    assert received.count(b"HTTP/1.1 200 ") == 5, received[:300]
    assert received.count(b"HTTP/1.1 431 ") == 1 and received.index(b"HTTP/1.1 431 ") > received.rindex(
        b"HTTP/1.1 200 "
    )


def test_the_bound_is_the_setting(small_heads: ServerProcess) -> None:
    assert _exchange(small_heads, _get(_header_block(3500))).startswith(b"HTTP/1.1 200 ")
    refused = _exchange(small_heads, _get(_header_block(5000)))
    assert refused.startswith(b"HTTP/1.1 431 ") and b"larger than 4096 bytes" in refused, refused[:300]


def test_a_head_trickled_one_byte_at_a_time_is_still_counted(small_heads: ServerProcess) -> None:
    """The count does not depend on how the head is cut into reads."""
    data = _get(_header_block(5000))
    received = b""
    with socket.create_connection(("127.0.0.1", small_heads.port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            for start in range(0, len(data), 97):  # small writes, each its own segment
                sock.sendall(data[start : start + 97])
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
    assert received.startswith(b"HTTP/1.1 431 "), received[:200]


# -- chunked framing and trailers ---------------------------------------------------------------
CHUNKED = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
)


@pytest.mark.parametrize(
    "start, piece, total",
    [
        (b"0\r\nX-Huge: ", b"t" * 65536, 64 * MiB),  # one endless trailer
        (b"0\r\n", b"X-Small: 1\r\n" * 5000, 200 * MiB),  # 200 MB of small trailers
    ],
    ids=["64-mb-trailer", "200-mb-of-small-trailers"],
)
def test_trailer_floods_are_cut_off_before_authentication(
    server: ServerProcess, start: bytes, piece: bytes, total: int
) -> None:
    """No token: the answer (401) does not wait for the body, and what follows is still bounded."""
    with PeakRss(server) as rss, ResponsivenessProbe(ask_healthz, server) as probe:
        flood = flood_head("127.0.0.1", server.port, start=CHUNKED + start, piece=piece, total=total)
    assert flood.sent < 16 * MiB, f"the server took {flood.sent / MiB:.0f} MiB of trailers"
    probe.assert_responsive()
    rss.assert_within(50 * MiB)


# -- how reads are cut: the protocol fed by hand -----------------------------------------------
class _Transport(asyncio.Transport):
    """What the protocol writes, and whether it closed: a loopback connection without a socket."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False
        self.changed = asyncio.Event()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8080)}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data
        self.changed.set()

    def close(self) -> None:
        self.closed = True
        self.changed.set()

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    async def until(self, answers: int) -> None:
        """Until ``answers`` answers are written, or the connection is closed."""
        async with asyncio.timeout(30):
            while not self.closed and self.written.count(b"HTTP/1.1 ") < answers:
                self.changed.clear()
                await self.changed.wait()


async def _answer_ok(scope: Any, receive: Any, send: Any) -> None:
    """Reads the whole body, then answers 200 with the number of body bytes it got."""
    size, more = 0, True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    body = str(size).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


async def _fed(pieces: list[bytes], *, answers: int, limit: int = 4096) -> _Transport:
    """A ``bounded_heads(limit)`` protocol given ``pieces`` as separate reads, once it has written
    ``answers`` answers or closed the connection."""
    config = uvicorn.Config(_answer_ok, lifespan="off", log_level="warning")
    config.load()
    transport = _Transport()
    protocol = bounded_heads(limit)(config=config, server_state=ServerState(), app_state={})
    protocol.connection_made(transport)
    for piece in pieces:
        protocol.data_received(piece)
    await transport.until(answers)
    seen = _Transport()
    seen.written, seen.closed = bytes(transport.written), transport.closed
    protocol.connection_lost(None)  # ends what still waits for a body
    return seen


async def test_a_head_whose_end_comes_in_reads_of_one_byte_is_served() -> None:
    """Its last bytes (``\\r``, ``\\n``, ``\\r``, ``\\n``) come one read each, the body (more than
    the room left under the bound) with the last."""
    head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n" + _header_block(4096 - 150) + b"\r\n"
    assert len(head) < 4096 < len(head) + 300
    transport = await _fed([head[:-3], head[-3:-2], head[-2:-1], head[-1:] + b"b" * 300], answers=1)
    assert transport.written.startswith(b"HTTP/1.1 200 ") and transport.written.endswith(b"300"), transport.written
    assert not transport.closed


async def test_a_head_over_the_limit_is_refused_however_it_is_cut() -> None:
    head = b"GET / HTTP/1.1\r\nHost: x\r\n" + _header_block(4200) + b"\r\n"
    for cut in (1, 7, 1000, 4096, 4097, len(head)):
        transport = await _fed([head[:cut], head[cut:]] if cut < len(head) else [head], answers=1)
        assert transport.written.startswith(b"HTTP/1.1 431 "), (cut, transport.written[:100])
        assert transport.closed


async def test_a_chunked_body_is_not_counted_but_its_framing_is() -> None:
    head = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunks = b"".join(b"%x\r\n%s\r\n" % (8192, b"b" * 8192) for _ in range(64))  # 512 KiB of body
    served = await _fed([head, chunks, b"0\r\nX-Checksum: 1\r\n\r\n"], answers=1)
    assert served.written.startswith(b"HTTP/1.1 200 ") and served.written.endswith(b"524288"), served.written[:200]
    trailers = b"0\r\n" + _header_block(5000)  # past the bound, and never ended
    refused = await _fed([head, chunks, trailers], answers=1)
    assert refused.closed and not refused.written, refused.written[:200]
    tiny = b"".join(b"1;ext=%s\r\nb\r\n" % (b"e" * 40) for _ in range(200))  # 200 bytes of body, 10 KB of framing
    assert (await _fed([head, tiny], answers=1)).closed


async def test_requests_pipelined_in_one_read_are_each_served() -> None:
    near = b"GET / HTTP/1.1\r\nHost: x\r\n" + _header_block(3000) + b"\r\n"
    transport = await _fed([near * 4], answers=4)
    assert transport.written.count(b"HTTP/1.1 200 ") == 4 and not transport.closed, transport.written[:200]
