"""Real loopback servers playing the webhook, shared by the webhook tests.

``webhook_server``: uvicorn runs a small Starlette app in a background thread on 127.0.0.1 with an
OS-chosen port, so the client under test goes through real sockets, aiohttp and the SSRF guard,
with nothing mocked. ``RawServer``: a TCP server on an event loop of its own thread that answers
byte for byte what a test needs, which is how hostile or broken upstreams are played.
"""

from __future__ import annotations

import asyncio
import collections
import json
import socket
import ssl
import threading
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import pytest
import pytest_asyncio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from registry.webhooks import OutboundClient, make_guarded_client, parse_networks
from tests.thread_server import port_of, serving_in_thread

NDJSON = "application/x-ndjson"
#: What the test clients may reach: loopback, where every test server lives.
LOOPBACK = parse_networks("127.0.0.0/8,::1/128")
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


@dataclass
class ServerState:
    """What the server saw, for assertions made from the test's side."""

    hits: collections.Counter[str] = field(default_factory=collections.Counter)
    #: Set when the streaming generator for ``?key=`` was closed (client went away).
    closed: dict[str, threading.Event] = field(default_factory=lambda: collections.defaultdict(threading.Event))
    #: Set when the streaming generator for ``?key=`` sends its first line.
    streaming: dict[str, threading.Event] = field(default_factory=lambda: collections.defaultdict(threading.Event))


def _line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def build_app(state: ServerState) -> ASGIApp:
    async def inspect(request: Request) -> Response:
        body = await request.body()
        return JSONResponse({"method": request.method, "headers": dict(request.headers), "body": body.decode()})

    async def call_tool_result(request: Request) -> Response:
        return JSONResponse(
            {
                "content": [{"type": "text", "text": "hi"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
                "structuredContent": {"greeting": "hi"},
                "_meta": {"dropped": True},
            }
        )

    async def call_tool_error(request: Request) -> Response:
        return JSONResponse({"content": [{"type": "text", "text": "nope"}], "isError": True})

    async def plain_object(request: Request) -> Response:
        return JSONResponse({"temperature": 21.5, "unit": "C"})

    async def plain_list(request: Request) -> Response:
        return JSONResponse([1, "two", {"three": 3}])

    async def bad_call_tool_result(request: Request) -> Response:
        return JSONResponse({"content": [{"text": "no type"}]})

    async def ndjson(request: Request) -> Response:
        async def events() -> AsyncIterator[bytes]:
            yield _line({"progress": 1, "total": 3, "message": "starting"})
            await asyncio.sleep(0.01)
            yield _line({"log": {"level": "info", "data": {"step": 1}}})
            # Split a line across chunks to exercise reassembly.
            second = _line({"progress": 2, "total": 3})
            yield second[:5]
            await asyncio.sleep(0.01)
            yield second[5:] + _line({"log": {"level": "warning", "data": "almost"}}) + b"\n"
            yield _line({"unknown": "ignored"})
            yield _line({"result": {"content": [{"type": "text", "text": "done"}], "structuredContent": {"n": 3}}})
            yield _line({"progress": 99})  # after the result: never seen

        return StreamingResponse(events(), media_type=NDJSON)

    async def ndjson_plain_result(request: Request) -> Response:
        return Response(_line({"result": {"answer": 42}}), media_type=NDJSON)

    async def ndjson_no_result(request: Request) -> Response:
        return Response(_line({"progress": 1}), media_type=NDJSON)

    async def ndjson_bad_line(request: Request) -> Response:
        return Response(_line({"progress": 1}) + b"{oops\n", media_type=NDJSON)

    async def ndjson_echo(request: Request) -> Response:
        """Answers with the request body as a one-line NDJSON stream, so a test picks the event."""
        return Response(await request.body() + b"\n", media_type=NDJSON)

    async def ndjson_forever(request: Request) -> Response:
        key = request.query_params.get("key", "")

        async def events() -> AsyncIterator[bytes]:
            try:
                n = 0
                state.streaming[key].set()
                while True:
                    n += 1
                    yield _line({"progress": n, "message": "x" * 100})
                    await asyncio.sleep(0.02)
            finally:
                state.closed[key].set()

        return StreamingResponse(events(), media_type=NDJSON)

    async def status(request: Request) -> Response:
        code = int(request.path_params["code"])
        return Response("upstream   exploded\n" + "x" * 5000, status_code=code, media_type="text/plain")

    async def redirect(request: Request) -> Response:
        return RedirectResponse("/plain-object", status_code=302)

    async def slow(request: Request) -> Response:
        # Polls for the client going away so no handler outlives the test that called it.
        deadline = time.monotonic() + float(request.query_params.get("s", "2"))
        while time.monotonic() < deadline:
            if await request.is_disconnected():
                break
            await asyncio.sleep(0.02)
        return JSONResponse({"late": True})

    async def invalid_json(request: Request) -> Response:
        return Response(b"{not json", media_type="application/json")

    async def nan_json(request: Request) -> Response:
        return Response(b'{"x": NaN}', media_type="application/json")

    async def big(request: Request) -> Response:
        n = int(request.query_params["n"])
        return Response(json.dumps("a" * n).encode(), media_type="application/json")

    async def big_chunked(request: Request) -> Response:
        n = int(request.query_params["n"])

        async def chunks() -> AsyncIterator[bytes]:
            yield b'"'
            for _ in range(n // 1000):
                yield b"a" * 1000
            yield b'"'

        return StreamingResponse(chunks(), media_type="application/json")

    async def gzip_bomb(request: Request) -> Response:
        """64 MB of JSON string inflated from ~64 kB: one network chunk, which a decoder without an
        output bound would inflate whole."""
        compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        body = compressor.compress(b'"') + compressor.compress(b"a" * (64 * 1024 * 1024)) + compressor.flush()
        return Response(body, media_type="application/json", headers={"Content-Encoding": "gzip"})

    async def empty(request: Request) -> Response:
        return Response(status_code=204)

    starlette = Starlette(
        routes=[
            Route("/inspect", inspect, methods=METHODS),
            Route("/canary", inspect, methods=METHODS),
            Route("/call-tool-result", call_tool_result, methods=METHODS),
            Route("/call-tool-error", call_tool_error, methods=METHODS),
            Route("/plain-object", plain_object, methods=METHODS),
            Route("/plain-list", plain_list, methods=METHODS),
            Route("/bad-call-tool-result", bad_call_tool_result, methods=METHODS),
            Route("/ndjson", ndjson, methods=METHODS),
            Route("/ndjson-plain-result", ndjson_plain_result, methods=METHODS),
            Route("/ndjson-no-result", ndjson_no_result, methods=METHODS),
            Route("/ndjson-bad-line", ndjson_bad_line, methods=METHODS),
            Route("/ndjson-echo", ndjson_echo, methods=METHODS),
            Route("/ndjson-forever", ndjson_forever, methods=METHODS),
            Route("/status/{code}", status, methods=METHODS),
            Route("/redirect", redirect, methods=METHODS),
            Route("/slow", slow, methods=METHODS),
            Route("/invalid-json", invalid_json, methods=METHODS),
            Route("/nan-json", nan_json, methods=METHODS),
            Route("/big", big, methods=METHODS),
            Route("/big-chunked", big_chunked, methods=METHODS),
            Route("/empty", empty, methods=METHODS),
            Route("/gzip-bomb", gzip_bomb, methods=METHODS),
        ]
    )

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            state.hits[scope["path"]] += 1
        await starlette(scope, receive, send)

    return app


@dataclass
class WebhookServer:
    base_url: str
    port: int
    state: ServerState

    def url(self, path: str, *, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


@pytest.fixture(scope="session")
def webhook_server() -> Iterator[WebhookServer]:
    state = ServerState()
    with serving_in_thread(build_app(state), name="the loopback webhook", timeout_graceful_shutdown=1) as server:
        port = port_of(server)
        yield WebhookServer(base_url=f"http://127.0.0.1:{port}", port=port, state=state)


@pytest_asyncio.fixture
async def client() -> AsyncIterator[OutboundClient]:
    """A guarded client that may reach loopback (where the test server lives) and nothing else."""
    async with make_guarded_client(parse_networks("127.0.0.0/8"), timeout=5.0) as guarded:
        yield guarded


@pytest.fixture
def free_port() -> int:
    """A loopback port with nothing listening on it (connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


# --------------------------------------------------------------------------- raw servers


RawHandler = Callable[["RawServer", asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


def http_answer(
    body: bytes, *, status: bytes = b"200 OK", headers: bytes = b"Content-Type: application/json\r\n"
) -> bytes:
    """A complete HTTP/1.1 answer with a Content-Length."""
    return b"HTTP/1.1 " + status + b"\r\n" + headers + b"Content-Length: %d\r\n\r\n" % len(body) + body


class RawServer:
    """A loopback TCP server (TLS with ``tls``) on an event loop of its own thread: every
    connection runs ``handler(server, reader, writer, index)``. It counts connections, keeps each
    request head (``heads``) and the paths asked for on each connection (``paths[index]``), so a
    test sees which connection carried which request. Usable from sync and async tests alike::

        with RawServer(handler) as server:
            ... server.url("/hook") ...

    ``gate`` is an asyncio.Event of the server's loop that handlers may wait on and the test opens
    with :meth:`open_gate` (a webhook that holds its answers until released).
    """

    def __init__(self, handler: RawHandler, *, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.port = 0
        self.connections = 0
        self.heads: list[bytes] = []
        self.paths: list[list[str]] = []
        #: Requests a handler is holding at the gate.
        self.held = 0
        self.loop = asyncio.new_event_loop()
        self.gate: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="raw server")

    @classmethod
    def answering(cls, answer: bytes, *, hold: bool = True) -> RawServer:
        """A server that answers each connection's first request with ``answer``, byte for byte,
        then holds the connection until the client closes it (``hold=False``: closes it at once)."""

        async def handler(
            server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int
        ) -> None:
            await server.read_request(reader, index)
            writer.write(answer)
            await writer.drain()
            if hold:
                await reader.read()

        return cls(handler)

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}{path}"

    def __enter__(self) -> RawServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=10)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()

    async def _start(self) -> None:
        self.gate = asyncio.Event()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def open_gate(self) -> None:
        """Let every request held at the gate (and every later one) through."""
        assert self.gate is not None
        self.loop.call_soon_threadsafe(self.gate.set)

    async def hold(self) -> None:
        """In a handler: wait at the gate, counted in ``held`` while waiting."""
        assert self.gate is not None
        self.held += 1
        try:
            await self.gate.wait()
        finally:
            self.held -= 1

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        index = self.connections
        self.connections += 1
        self.paths.append([])
        try:
            await self.handler(self, reader, writer, index)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    async def read_request(self, reader: asyncio.StreamReader, index: int) -> bytes:
        """One request: its head (kept, its path noted for connection ``index``) and its body (read and dropped)."""
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        self.paths[index].append(head.split(b" ", 2)[1].decode("latin-1"))
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                await reader.readexactly(int(value))
        return head
