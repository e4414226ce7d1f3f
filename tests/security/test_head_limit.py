"""Request heads are bounded before anything else runs (issue 23, point 3).

uvicorn's httptools protocol gathers a request line and headers without a bound: one connection
sending a 64 MB header value held ``/healthz`` for 10.5 s, and 200 MB of small headers added
600 MB of RSS. ``registry.serving.HeadBoundProtocol`` counts a head's bytes as they arrive and
answers 431 past ``REGISTRY_LIMIT_REQUEST_HEAD_BYTES``. Each attack runs against a real
``mcp-registry serve`` process (the embedded default); ``tests/test_deploy.py`` repeats the two
floods through the shipped nginx.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from registry.limits import DEFAULT_LIMITS
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
    with PeakRss(server) as rss, ResponsivenessProbe(ask_healthz, server.url) as probe:
        flood = flood_head("127.0.0.1", server.port, start=START + b"X-Huge: ", piece=b"a" * 65536, total=64 * MiB)
    assert flood.sent < 16 * MiB, f"the server took {flood.sent / MiB:.0f} MiB of one head"
    assert flood.status in (None, 431), flood.answer[:200]  # the 431 may be cut off by the reset
    probe.assert_responsive(median_s=0.1)
    rss.assert_within(50 * MiB)


def test_200_mb_of_small_headers_are_refused_while_others_are_served(server: ServerProcess) -> None:
    piece = b"X-Small: 1\r\n" * 5000
    with PeakRss(server) as rss, ResponsivenessProbe(ask_healthz, server.url) as probe:
        flood = flood_head("127.0.0.1", server.port, start=START, piece=piece, total=200 * MiB)
    assert flood.sent < 16 * MiB, f"the server took {flood.sent / MiB:.0f} MiB of one head"
    assert flood.status in (None, 431), flood.answer[:200]
    probe.assert_responsive(median_s=0.1)
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
    also when the body arrives in the same read as the head."""
    headers = _header_block(HEAD_LIMIT - 400)
    with httpx.Client(base_url=server.url, timeout=30) as http:
        assert http.get("/healthz", headers=_as_dict(headers)).status_code == 200
        body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "padding": "' + b"p" * (2 * MiB) + b'"}'
        answer = http.post(
            "/mcp",
            content=body,
            headers={
                **_as_dict(headers),
                "Content-Type": "application/json",
                "Accept": "application/json",
                "Authorization": f"Bearer {server.admin_token}",
            },
        )
    # Past the head check: the transport's own answer (no session), not a 431.
    assert answer.status_code == 400 and "Mcp-Session-Id" in answer.text, answer.text


def test_each_request_of_a_keep_alive_connection_gets_the_whole_bound(server: ServerProcess) -> None:
    """The count starts again with each request: heads of most of the bound, pipelined in one
    write, are all served, and so is the next one on the same connection; a head over the bound
    that follows is refused, after the answers before it."""
    near = _header_block(HEAD_LIMIT - 200)
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(_get(near, close=False) * 3)
        received = b""
        while received.count(b"HTTP/1.1 200 ") < 3:
            received += sock.recv(65536)
        sock.sendall(_get(_header_block(HEAD_LIMIT + 200), close=False))
        while chunk := sock.recv(65536):
            received += chunk
    assert received.count(b"HTTP/1.1 200 ") == 3, received[:300]
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
