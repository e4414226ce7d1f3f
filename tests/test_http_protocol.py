"""``registry.serving.HttpProtocol``: an answer's head and body leave in one write, a held head is
never late, a route's immediate answers (and every way back to the ASGI app) are exact, and
keep-alive still closes idle connections, under a real uvicorn on a loopback port.

A recording layer sits under the protocol's own transport wrapper, on the real uvloop/asyncio
transport, so each test sees exactly the writes that reach the socket."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from registry.mcp.http_common import ImmediateAnswer
from registry.serving import HttpProtocol, _HeadHoldingTransport
from tests.thread_server import port_of, serving_in_thread
from tests.waiting import wait_until

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


ASGI_CALLS: list[str] = []
IMMEDIATE_CALLS: list[bytes] = []


#: What each ``then`` saw when it ran: the writes that had reached the socket by then.
THEN_SAW: list[list[bytes]] = []


def _then_records() -> None:
    THEN_SAW.append(list(WRITES))


def _then_fails() -> None:
    THEN_SAW.append(list(WRITES))
    raise RuntimeError("bookkeeping bug")


def answer_now(headers: list[tuple[bytes, bytes]], body: bytes) -> ImmediateAnswer | None:
    """The immediate route of ``/now``: answers the body back, except "later" (None: the ASGI app
    answers) and "boom" (a bug: the ASGI app answers too). "then" and "then-fails" leave work for
    after the answer is written (``_then_records``; ``_then_fails``, which raises)."""
    IMMEDIATE_CALLS.append(body)
    assert (b"host", b"x") in headers or any(name == b"host" for name, _ in headers)
    if body == b"later" or len(body) > 16 * 1024:
        return None
    if body == b"boom":
        raise RuntimeError("boom")
    then = {b"then": _then_records, b"then-fails": _then_fails}.get(body)
    return 201, [(b"content-type", b"text/plain"), (b"x-answered", b"now")], b"now:" + body, then


class App:
    """The ASGI app, and the ``immediate_route`` that ``HttpProtocol`` looks for on it."""

    def immediate_route(self, raw_path: bytes) -> Any:
        return answer_now if raw_path == b"/now" else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        await _app(scope, receive, send)


app = App()


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    path = scope["path"]
    ASGI_CALLS.append(path)
    if path == "/slow":  # answered after a while (keep-alive must not close a busy connection)
        await asyncio.sleep(1.5)
        path = "/json"
    if path == "/stream":  # a head, then the first event a while later (an SSE stream)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await asyncio.sleep(0.5)
        await send({"type": "http.response.body", "body": b"event", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    if path in ("/echo", "/now"):  # reads the body first (Expect: 100-continue is answered on that read)
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
    if path == "/now":
        body = b"asgi:" + body
        headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})


@contextlib.contextmanager
def _serving(**config: Any) -> Iterator[str]:
    with _server(**config) as (url, _):
        yield url


@contextlib.contextmanager
def _server(**config: Any) -> Iterator[tuple[str, uvicorn.Server]]:
    config = {"proxy_headers": False, "access_log": True, **config}
    with serving_in_thread(app, name="the test server", http=RecordingProtocol, **config) as server:
        yield f"http://127.0.0.1:{port_of(server)}", server


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with _serving() as url:
        yield url


@pytest.fixture(autouse=True)
def fresh_record() -> None:
    WRITES.clear()
    ASGI_CALLS.clear()
    IMMEDIATE_CALLS.clear()
    THEN_SAW.clear()


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
    answer = _continued(int(server_url.rsplit(":", 1)[1]), "/echo", b"hello", b"hello")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")


def _continued(port: int, path: str, body: bytes, ends_with: bytes) -> bytes:
    """A POST with ``Expect: 100-continue``: the body is sent once the server says continue; the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n"
        sock.sendall(head.encode())
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        answer = b""
        while not answer.endswith(ends_with):
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
        return answer


def _exchange(port: int, request: bytes, answers: int) -> list[bytes]:
    """Send raw bytes on one connection; the ``answers`` complete responses that come back (each
    with a content-length)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        return _read_answers(sock, answers)


def _read_answers(sock: socket.socket, answers: int) -> list[bytes]:
    data = b""
    found: list[bytes] = []
    while len(found) < answers:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0:
            head = data[:head_end].lower()
            length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
            end = head_end + 4 + length
            if len(data) >= end:
                found.append(data[:end])
                data = data[end:]
                continue
        chunk = sock.recv(65536)
        assert chunk, (found, data)
        data += chunk
    assert not data, data  # nothing more than what was asked for
    return found


def _post(path: str, body: bytes, extra: str = "") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_a_route_answers_at_once_without_the_asgi_app(server_url: str) -> None:
    with httpx.Client(base_url=server_url) as client:
        for n in range(3):  # kept alive: each request on the connection is answered at once
            answer = client.post("/now", content=b"ping %d" % n)
            assert answer.status_code == 201 and answer.content == b"now:ping %d" % n
            assert answer.headers["x-answered"] == "now" and answer.headers["content-type"] == "text/plain"
            assert answer.headers["server"] == "uvicorn" and "date" in answer.headers  # uvicorn's defaults
    assert ASGI_CALLS == [] and IMMEDIATE_CALLS == [b"ping 0", b"ping 1", b"ping 2"]
    assert len(WRITES) == 3 and all(w.startswith(b"HTTP/1.1 201 Created\r\n") for w in WRITES), WRITES
    # Other paths and methods never reach the route.
    with httpx.Client(base_url=server_url) as client:
        assert client.post("/echo", content=b"x").content == b"x"
        assert client.get("/now").content == b"asgi:"
        assert client.post("/now?q=1", content=b"y").content == b"asgi:y"  # the target as sent, query and all
    assert IMMEDIATE_CALLS == [b"ping 0", b"ping 1", b"ping 2"]


def test_work_left_for_after_an_immediate_answer_runs_once_it_is_written(
    server_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``then`` runs after the answer's write reached the socket, once per answer; if it fails,
    the failure is logged and the answer and the connection are unharmed."""
    with httpx.Client(base_url=server_url) as client, caplog.at_level(logging.ERROR, logger="registry"):
        answer = client.post("/now", content=b"then")
        assert answer.status_code == 201 and answer.content == b"now:then"
        # Work after an answer may still be running when the client has the answer.
        wait_until(lambda: len(THEN_SAW) == 1, "then to run", timeout=5, interval=0.005)
        assert THEN_SAW[0] == WRITES and THEN_SAW[0][-1].endswith(b"\r\n\r\nnow:then"), THEN_SAW
        failing = client.post("/now", content=b"then-fails")
        assert failing.status_code == 201 and failing.content == b"now:then-fails"
        wait_until(lambda: "bookkeeping bug" in caplog.text, "the failure to be logged", timeout=5, interval=0.005)
        assert "work after an immediate answer failed" in caplog.text
        assert len(THEN_SAW) == 2 and THEN_SAW[1][-1].endswith(b"\r\n\r\nnow:then-fails"), THEN_SAW
        # The same connection goes on being answered at once, with nothing left to run.
        assert client.post("/now", content=b"after").content == b"now:after"
    assert ASGI_CALLS == [] and IMMEDIATE_CALLS == [b"then", b"then-fails", b"after"]
    assert len(THEN_SAW) == 2


def test_immediate_answers_read_in_one_loop_turn_are_written_together_when_it_ends() -> None:
    """Requests from several connections read in one turn of the event loop: the turn's first
    answer is written at once, the others are held by their connections and written when the
    turn ends (their ``then`` runs before that, so before the connection's next request)."""
    with _server() as (url, server):
        loop = server.servers[0].get_loop()
        socks = [socket.create_connection(("127.0.0.1", _port(url)), timeout=5) for _ in range(3)]
        blocked, release = threading.Event(), threading.Event()
        try:
            for n, sock in enumerate(socks):  # each connection accepted and answered once
                sock.sendall(_post("/now", b"hello %d" % n))
                assert _read_answers(sock, 1)[0].endswith(b"\r\n\r\nnow:hello %d" % n)
            WRITES.clear()
            loop.call_soon_threadsafe(lambda: (blocked.set(), release.wait(5)))
            assert blocked.wait(5)
            for sock in socks:  # all three arrive while the loop is busy: it reads them in one turn
                sock.sendall(_post("/now", b"then"))
            time.sleep(0.2)
            release.set()
            for sock in socks:
                (answer,) = _read_answers(sock, 1)
                assert answer.startswith(b"HTTP/1.1 201 Created\r\n") and answer.endswith(b"\r\n\r\nnow:then")
        finally:
            release.set()
            for sock in socks:
                sock.close()
    # Each then saw what had been written when it ran: the first answer only, for all three.
    assert [len(seen) for seen in THEN_SAW] == [1, 1, 1], THEN_SAW
    assert len(WRITES) == 3 and all(write.endswith(b"now:then") for write in WRITES), WRITES


def test_a_held_answer_goes_before_anything_its_connection_writes_after_it(server_url: str) -> None:
    """Two answers in one turn on one connection, then a malformed request: uvicorn's 400 is
    written through the connection's transport, which sends the held answer first."""
    request = _post("/now", b"one") + _post("/now", b"two") + b"NOT HTTP AT ALL\r\n\r\n"
    answers = _exchange(_port(server_url), request, 3)
    assert [a.split(b"\r\n\r\n", 1)[1] for a in answers[:2]] == [b"now:one", b"now:two"], answers
    assert answers[2].startswith(b"HTTP/1.1 400 Bad Request\r\n"), answers
    # The second answer was held and left in one write with the 400.
    assert len(WRITES) == 2 and WRITES[1].startswith(b"HTTP/1.1 201 Created") and b"400 Bad Request" in WRITES[1]


def test_what_a_connection_holds_stays_under_the_join_bound(server_url: str) -> None:
    """Many pipelined requests answered in one turn: past ``JOIN_MAX`` held bytes the held
    answers are written, so no connection holds (or copies) more than that, and all arrive in order."""
    bodies = [b"%04d" % n + b"x" * 1000 for n in range(150)]  # ~170 KB of answers, read in one or two turns
    answers = _exchange(_port(server_url), b"".join(_post("/now", body) for body in bodies), len(bodies))
    assert [a.split(b"\r\n\r\n", 1)[1] for a in answers] == [b"now:" + body for body in bodies]
    one = len(answers[0])
    assert len(WRITES) >= 3 and max(len(write) for write in WRITES) <= _HeadHoldingTransport.JOIN_MAX + one, [
        len(write) for write in WRITES
    ]


def test_answers_held_when_the_client_shuts_its_side_are_handed_over_before_the_close() -> None:
    """uvloop closes the transport itself when ``eof_received`` returns None (as uvicorn's does):
    what the connection holds for the end of the turn is written first."""
    written: list[bytes] = []

    class Transport:
        def write(self, data: bytes) -> None:
            written.append(data)

        def is_closing(self) -> bool:
            return False

        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return default

        pause_reading = resume_reading = close = lambda self: None

    loop = asyncio.new_event_loop()
    try:
        holding = _HeadHoldingTransport(Transport(), loop)  # type: ignore[arg-type]
        holding.hold(b"answer one")
        holding.hold(b"answer two")
        protocol = HttpProtocol.__new__(HttpProtocol)  # only what eof_received uses
        protocol._holding = holding
        assert protocol.eof_received() is None  # None: the transport is closed by uvloop
        assert written == [b"answer oneanswer two"]
    finally:
        loop.close()


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda t: t.writelines([b"three", b"four"]), ["one two ", ("writelines", [b"three", b"four"])]),
        (lambda t: t.write_eof(), ["one two ", ("write_eof",)]),
        (lambda t: t.close(), ["one two ", ("close",)]),
        (lambda t: t.abort(), [("abort",)]),
    ],
    ids=["writelines", "write_eof", "close", "abort"],
)
def test_every_way_of_writing_or_closing_sends_what_is_held_first(call: Any, expected: list[Any]) -> None:
    """Nothing a connection writes after a held answer can overtake it; an abort drops it, as
    the transport drops its own buffer."""
    seen: list[Any] = []

    class Transport:
        def write(self, data: bytes) -> None:
            seen.append(data.decode())

        def writelines(self, parts: list[bytes]) -> None:
            seen.append(("writelines", list(parts)))

        def write_eof(self) -> None:
            seen.append(("write_eof",))

        def close(self) -> None:
            seen.append(("close",))

        def abort(self) -> None:
            seen.append(("abort",))

        def is_closing(self) -> bool:
            return False

        get_extra_info = pause_reading = resume_reading = lambda self, *a: None

    loop = asyncio.new_event_loop()
    try:
        holding = _HeadHoldingTransport(Transport(), loop)  # type: ignore[arg-type]
        holding.hold(b"one ")
        holding.hold(b"two ")
        call(holding)
        holding.flush()  # what the end of the turn does: nothing is left to write
        assert seen == expected
    finally:
        loop.close()


def test_what_the_route_declines_or_fails_the_asgi_app_answers_with_the_whole_body(
    server_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with httpx.Client(base_url=server_url) as client:
        assert client.post("/now", content=b"later").content == b"asgi:later"
        with caplog.at_level(logging.ERROR, logger="registry"):
            assert client.post("/now", content=b"boom").content == b"asgi:boom"
        assert "immediate answer failed" in caplog.text
        big = bytes(range(256)) * 200  # 51,200 bytes: past what is buffered, handed over as it comes
        assert client.post("/now", content=big).content == b"asgi:" + big
    assert ASGI_CALLS == ["/now", "/now", "/now"]
    assert IMMEDIATE_CALLS == [b"later", b"boom"]  # the big body was never offered


def test_pipelined_requests_are_answered_in_order_whichever_path_answers(server_url: str) -> None:
    requests = (
        _post("/now", b"one")
        + _post("/now", b"later")
        + _post("/now", b"three")
        + _post("/echo", b"four")
        + _post("/now", b"five")
    )
    answers = _exchange(_port(server_url), requests, 5)
    bodies = [a.split(b"\r\n\r\n", 1)[1] for a in answers]
    assert [b.rsplit(b":", 1)[-1] for b in bodies] == [b"one", b"later", b"three", b"four", b"five"], bodies
    # Requests queued behind one the ASGI app is answering wait their turn there.
    assert bodies[:2] == [b"now:one", b"asgi:later"], bodies


def test_expect_100_continue_and_http_1_0_go_to_the_asgi_app(server_url: str) -> None:
    port = _port(server_url)
    assert _continued(port, "/now", b"abc", b"asgi:abc").startswith(b"HTTP/1.1 200 OK\r\n")
    (old,) = _exchange(port, b"POST /now HTTP/1.0\r\nHost: x\r\nContent-Length: 3\r\n\r\nold", 1)
    assert old.endswith(b"asgi:old")
    assert IMMEDIATE_CALLS == []


def test_keep_alive_closes_idle_connections_and_never_a_busy_one() -> None:
    with _serving(timeout_keep_alive=1) as url, socket.create_connection(("127.0.0.1", _port(url)), timeout=5) as sock:
        for path, body in (("/now", b"a"), ("/now", b"later")):  # both paths arm the timer
            sock.sendall(_post(path, body))
            assert sock.recv(65536).startswith(b"HTTP/1.1 ")
            time.sleep(0.6)  # within the timeout: still open (the timer counts from the last answer)
        sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")  # busy for 1.5 s: past the timeout
        started = time.monotonic()
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK"), "a busy connection was closed"
        assert time.monotonic() - started > 1.2
        sock.settimeout(5)
        idle_from = time.monotonic()
        assert sock.recv(65536) == b""  # closed by the server once idle for the timeout
        idle_s = time.monotonic() - idle_from
        assert 0.8 < idle_s < 3.0, idle_s


def test_a_request_read_with_an_immediate_answer_keeps_its_connection_busy() -> None:
    """An immediate answer and a slow request in one read: the timer must not see the connection
    idle from the answer on, while the slow request is still being served."""
    with _serving(timeout_keep_alive=1) as url, socket.create_connection(("127.0.0.1", _port(url)), timeout=5) as sock:
        sock.sendall(_post("/now", b"a") + b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while b"now:a" not in data or not data.endswith(b'{"ok":true}'):
            chunk = sock.recv(65536)
            assert chunk, f"closed while busy: {data!r}"
            data += chunk


def test_shutdown_answers_a_request_whose_body_is_still_arriving() -> None:
    with _server() as (url, server), socket.create_connection(("127.0.0.1", _port(url)), timeout=5) as sock:
        sock.sendall(b"POST /now HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello")
        time.sleep(0.2)  # the head and half the body are read: buffered for an immediate answer
        server.should_exit = True
        time.sleep(0.3)  # uvicorn's shutdown has reached the connection
        sock.sendall(b"world")
        answer = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"asgi:helloworld"), answer
        assert b"connection: close" in answer.lower()


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_immediate_answers_are_in_the_access_log_like_any_other() -> None:
    keep = _Keep()
    access = logging.getLogger("uvicorn.access")
    with _serving(log_level="info") as url:
        access.addHandler(keep)
        try:
            with httpx.Client(base_url=url) as client:
                assert client.post("/now", content=b"a").status_code == 201
                assert client.post("/now", content=b"later").status_code == 200
        finally:
            access.removeHandler(keep)
    assert len(keep.lines) == 2, keep.lines
    assert keep.lines[0].startswith("127.0.0.1:") and keep.lines[0].endswith(' - "POST /now HTTP/1.1" 201'), keep.lines
    assert keep.lines[1].endswith(' - "POST /now HTTP/1.1" 200'), keep.lines


def test_behind_trusted_proxies_an_access_log_names_the_forwarded_client() -> None:
    """With uvicorn's proxy headers on and an access log, nothing is answered at once: the log line
    must name the client the proxy forwarded, which only the ASGI path (its middleware) knows."""
    keep = _Keep()
    access = logging.getLogger("uvicorn.access")
    with _serving(log_level="info", proxy_headers=True, forwarded_allow_ips="127.0.0.1") as url:
        access.addHandler(keep)
        try:
            answer = httpx.post(url + "/now", content=b"a", headers={"X-Forwarded-For": "203.0.113.9"})
        finally:
            access.removeHandler(keep)
    assert answer.content == b"asgi:a" and IMMEDIATE_CALLS == []
    assert keep.lines and keep.lines[0].startswith("203.0.113.9:"), keep.lines
