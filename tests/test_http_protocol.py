"""``registry.serving.HttpProtocol``: an answer's head and body leave in one write, and a held
head is never late, under a real uvicorn on a loopback port.

A recording layer sits under the protocol's own transport wrapper, on the real uvloop/asyncio
transport, so each test sees exactly the writes that reach the socket."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from registry.serving import HttpProtocol
from tests.serve_process import free_port

BIG = b"x" * (200 * 1024)


class _Recording:
    """Passes every call to the real transport, keeping a copy of what is written."""

    def __init__(self, transport: asyncio.Transport, writes: list[bytes]) -> None:
        self._transport = transport
        self.writes = writes

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


WRITES: list[bytes] = []


class RecordingProtocol(HttpProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_Recording(transport, WRITES))  # type: ignore[arg-type]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    path = scope["path"]
    if path == "/stream":  # a head, then the first event a while later (an SSE stream)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await asyncio.sleep(0.5)
        await send({"type": "http.response.body", "body": b"event", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    if path == "/echo":  # reads the body first (Expect: 100-continue is answered on that read)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
    else:
        body = BIG if path == "/big" else b'{"ok":true}'
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if path == "/close":
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", http=RecordingProtocol)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "test server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(autouse=True)
def fresh_record() -> None:
    WRITES.clear()


def test_an_answer_leaves_in_one_write_with_its_head(server_url: str) -> None:
    with httpx.Client(base_url=server_url) as client:
        for _ in range(3):  # kept alive: every answer on the connection, not only the first
            answer = client.get("/json")
            assert answer.status_code == 200 and answer.json() == {"ok": True}
    assert len(WRITES) == 3, WRITES
    for write in WRITES:
        assert write.startswith(b"HTTP/1.1 200 OK\r\n") and write.endswith(b'\r\n\r\n{"ok":true}'), write


def test_a_large_body_follows_its_head_without_a_copy(server_url: str) -> None:
    answer = httpx.get(server_url + "/big")
    assert answer.content == BIG
    assert len(WRITES) == 2 and WRITES[0].endswith(b"\r\n\r\n") and WRITES[1] == BIG


def test_a_head_with_no_body_yet_is_sent_at_once(server_url: str) -> None:
    """A stream's head is not held until its first event: the client sees it straight away."""
    with socket.create_connection(("127.0.0.1", int(server_url.rsplit(":", 1)[1])), timeout=5) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        head = sock.recv(65536)
        head_s = time.monotonic() - started
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n"), head
        assert head_s < 0.4, f"the head waited {head_s:.2f}s for the first event"
        rest = b""
        while not rest.endswith(b"0\r\n\r\n"):
            rest += sock.recv(65536)
        assert b"event" in rest
    assert WRITES[0] == head


def test_head_requests_100_continue_and_closing_answers_are_complete(server_url: str) -> None:
    with httpx.Client(base_url=server_url) as client:
        head = client.head("/json")
        assert head.status_code == 200 and head.headers["content-length"] == "11" and head.content == b""
        closing = client.get("/close")
        assert closing.json() == {"ok": True} and closing.headers["connection"] == "close"
    port = int(server_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"hello")
        answer = b""
        while not answer.endswith(b"hello"):
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
