"""Running the ASGI app under uvicorn, with a shutdown that suits long-lived streams."""

from __future__ import annotations

import asyncio
import logging
import resource
import weakref
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from registry.mcp.http_common import AnswerNow

log = logging.getLogger("registry")


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft limit of open files to its hard limit; returns (soft, hard) after.

    Every MCP stream holds a socket, and a deployment holds 10,000 and more; the soft limit is
    often 1,024 (systemd's default) while the hard one allows far more. Only the soft limit moves,
    which needs no privilege; a hard limit that is itself low is left alone and named in the log.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (OSError, ValueError) as exc:
            log.warning("cannot raise the open-files limit from %d to %d: %s", soft, want, exc)
            return soft, hard
        log.info("open-files limit (RLIMIT_NOFILE) raised from %d to the hard limit %d", soft, want)
        soft = want
    return soft, hard


class DrainingServer(uvicorn.Server):
    """On SIGTERM/SIGINT, first close every MCP stream, so their clients reconnect (to another
    replica behind the load balancer) and uvicorn's graceful shutdown is not held open by them.

    Its open-files limit is raised to the hard limit first (``raise_open_files_limit``): each
    stream is a socket."""

    def __init__(self, config: uvicorn.Config, *, drain: Callable[[], None]) -> None:
        super().__init__(config)
        self._drain = drain
        raise_open_files_limit()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._drain()
        super().handle_exit(sig, frame)


class _HeadHoldingTransport:
    """A transport that holds a response head back until the body's first write, then sends both
    as one ``write``, so an answer goes out in one system call and one segment instead of two.

    uvicorn writes the status line and headers, then the body, as two writes (an ASGI app has no
    way to send them together). Measured at one agent on two cores: the first write wakes the
    client, which then often runs before the server reaches the second, and those answers land
    in the p99 (corking the socket around the two writes halved it; see benchmarks/README.md).

    A held head is never late by more than one turn of the event loop: it goes with the next
    write, before a close, or at the end of the turn (a stream whose first event comes later).
    ``hold`` keeps immediate answers back the same way (``_TurnWrites``). Every way of writing or
    closing (``write``, ``writelines``, ``write_eof``, ``close``) sends what is held first, so
    order on a connection is kept; ``abort`` drops it with the transport's own buffer. Everything
    else is passed through to uvloop's transport untouched.
    """

    __slots__ = (
        "_held",
        "_held_size",
        "_loop",
        "_transport",
        "get_extra_info",
        "is_closing",
        "pause_reading",
        "resume_reading",
    )

    #: Bodies up to this size are joined to their head (a copy); larger ones are written after it.
    JOIN_MAX = 64 * 1024

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        #: What is held, in order (joined once, when written), and its size.
        self._held: list[bytes] | None = None
        self._held_size = 0
        # What uvicorn calls on every request, bound once: ``__getattr__`` is a slow path.
        self.is_closing = transport.is_closing
        self.get_extra_info = transport.get_extra_info
        self.pause_reading = transport.pause_reading
        self.resume_reading = transport.resume_reading

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held, self._held_size = None, 0
            if len(data) <= self.JOIN_MAX:
                held.append(bytes(data))
                self._transport.write(b"".join(held))
                return
            self._transport.write(b"".join(held))
        elif data[:5] == b"HTTP/" and data[-4:] == b"\r\n\r\n":
            self._held, self._held_size = [bytes(data)], len(data)
            self._loop.call_soon(self.flush)
            return
        self._transport.write(data)

    def hold(self, data: bytes) -> None:
        """Keep ``data`` back, after anything already held, until the next ``write``, ``flush`` or
        ``close``: whatever this connection writes later still goes after it. Past ``JOIN_MAX``
        held bytes it is all written at once, so what a connection holds stays small, and a client
        that pipelines requests without reading meets the transport's flow control as before."""
        held = self._held
        if held is None:
            self._held, self._held_size = [data], len(data)
        else:
            held.append(data)
            self._held_size += len(data)
        if self._held_size > self.JOIN_MAX:
            self.flush()

    def flush(self) -> None:
        held, self._held, self._held_size = self._held, None, 0
        if held is not None and not self._transport.is_closing():
            self._transport.write(b"".join(held))  # one part: that bytes object itself, no copy

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.flush()
        self._transport.writelines(list_of_data)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        """Drops what is held, as the transport drops what it buffers."""
        self._held, self._held_size = None, 0
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:  # everything else: the real transport's
        return getattr(self._transport, name)


class _TurnWrites:
    """The immediate answers of one turn of the event loop: the first is written at once, the
    others are held by their connections and written together when the turn's reads are done.

    With many agents, one turn of the loop reads requests from many connections, and answering
    each costs its own write. A write that finds the client asleep also wakes it, and on a virtual
    machine a wake-up across cores is dear: measured at 32 agents on two cores, a 700-byte answer's
    write took 18 µs, a third of a cached prompts/get. Written back to back once the turn's reads
    are done (``call_soon``: after this poll's reads, with the other ready callbacks queued before
    it), the answers find the client awake from the first: 17,500-18,300 against 29,300-30,200
    answers/s (benchmarks/README.md). The first answer of a turn is not held, so one agent's
    answer never waits for anything.

    One per event loop (``for_loop``), used on that loop's thread only. It does not refer to its
    loop (the loop is the key of a weak mapping to it), so a finished loop is not kept alive.
    """

    __slots__ = ("_held",)

    _by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _TurnWrites] = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        #: None: nothing written in this turn yet; else the connections holding an answer.
        self._held: list[_HeadHoldingTransport] | None = None

    @classmethod
    def for_loop(cls, loop: asyncio.AbstractEventLoop) -> _TurnWrites:
        writes = cls._by_loop.get(loop)
        if writes is None:
            writes = cls._by_loop[loop] = cls()
        return writes

    def write(self, loop: asyncio.AbstractEventLoop, transport: _HeadHoldingTransport, data: bytes) -> None:
        """Writes ``data`` now (the turn's first answer) or has ``transport`` hold it until the turn ends."""
        held = self._held
        if held is None:
            loop.call_soon(self._end_turn)  # ready callbacks run once this turn's reads are done
            self._held = []
            transport.write(data)
            return
        transport.hold(data)
        held.append(transport)

    def _end_turn(self) -> None:
        held, self._held = self._held, None
        for transport in held or ():
            try:
                transport.flush()  # nothing if the connection has written it since, or is closing
            except Exception:  # one broken connection must not keep the others' answers back
                log.exception("writing a held answer failed")


#: Largest body the immediate path buffers; a larger one goes to the ASGI app as it arrives.
IMMEDIATE_BODY_MAX = 16 * 1024


_default_heads: tuple[list[tuple[bytes, bytes]], bytes] | None = None


def _default_head(default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """uvicorn's default headers (date, server) as written: uvicorn replaces the list once a
    second (the date), so it is joined once per list, not once per answer."""
    global _default_heads
    cached = _default_heads
    if cached is not None and cached[0] is default_headers:
        return cached[1]
    joined = b"".join(name + b": " + value + b"\r\n" for name, value in default_headers)
    _default_heads = (default_headers, joined)
    return joined


def _immediate_router(app: Any, *, behind_proxy_ok: bool) -> Callable[[bytes], AnswerNow | None] | None:
    """The app's ``immediate_route`` (see ``HttpProtocol``), looked for through uvicorn's own
    proxy-headers wrapper only (when ``behind_proxy_ok``): any other middleware must see every
    request, so it has none."""
    while isinstance(app, ProxyHeadersMiddleware):
        if not behind_proxy_ok:
            return None
        app = app.app
    route = getattr(app, "immediate_route", None)
    return route if callable(route) else None


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, given to uvicorn as ``Config(http=...)`` (its documented way
    to choose the HTTP protocol class), with three changes on the agents' hot path:

    - answers go through a ``_HeadHoldingTransport``: head and body in one write;
    - **immediate answers.** A POST whose path the app names in ``immediate_route(raw_path)``
      is buffered (up to ``IMMEDIATE_BODY_MAX``) and, once complete, offered to that route's
      ``answer_now(headers, body)`` right here in the parser's callback. A request it can answer
      from memory (an MCP ``prompts/get`` of a cached render, say) is written back at once, with
      no ASGI task, scope, receive/send messages or event: measured on two cores, uvicorn's
      per-request ASGI machinery is half of what a bare ASGI app costs (34,500 against 65,000
      answers/s). ``None`` means "not now": the request then runs through the ASGI app as
      usual, with the buffered body, so the app's behaviour is the same either way.
    - **one turn's answers together.** The immediate answers of one turn of the event loop are
      written by ``_TurnWrites``: the first at once, the others once the turn's reads are done (see there).

    Only simple requests are offered: HTTP/1.1 keep-alive, no ``Expect: 100-continue``, no
    upgrade, nothing pipelined ahead of it, and the socket's write buffer not full (a client that
    does not read its answers meets uvicorn's flow control on the ASGI path).
    """

    _answer_now: AnswerNow | None = None
    _immediate_body: bytes = b""
    #: Keep-alive: whether the connection is idle (no request since the last answer), since when,
    #: and the one timer that checks it (see ``_arm_keep_alive``).
    _idle = False
    _idle_since = 0.0
    _keep_alive_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        holding = _HeadHoldingTransport(transport, self.loop)
        self._holding = holding
        self._turn_writes = _TurnWrites.for_loop(self.loop)
        super().connection_made(holding)  # type: ignore[arg-type]
        # Not with a concurrency limit or a root path (the app's routes would not see "/mcp"), and
        # not behind trusted proxies when access-logging (the log names the forwarded client).
        simple = self.limit_concurrency is None and not self.root_path
        self._route = _immediate_router(self.app, behind_proxy_ok=not self.access_log) if simple else None

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._idle = False  # a request has begun (perhaps in the same read as an answered one)

    def on_headers_complete(self) -> None:
        route = self._route
        if (
            route is not None
            and self.parser.get_method() == b"POST"
            and not self.expect_100_continue
            and (self.cycle is None or self.cycle.response_complete)
            and not self.pipeline
            and not self.flow.write_paused
            and self.parser.should_keep_alive()
            and self.parser.get_http_version() == "1.1"
            and not self.parser.should_upgrade()
        ):
            answer_now = route(self.url)
            if answer_now is not None:
                self._answer_now = answer_now
                self._immediate_body = b""
                return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self._answer_now is None:
            super().on_body(body)
            return
        buffered = self._immediate_body + body
        if len(buffered) <= IMMEDIATE_BODY_MAX:
            self._immediate_body = buffered
            return
        self._to_asgi(buffered)

    def on_message_complete(self) -> None:
        answer_now = self._answer_now
        if answer_now is None:
            super().on_message_complete()
            return
        body, self._immediate_body = self._immediate_body, b""
        try:
            answer = answer_now(self.headers, body)
        except Exception:  # a bug in the immediate path must not cost the request: the app answers it
            log.exception("immediate answer failed; the request goes to the ASGI app")
            answer = None
        if answer is None:
            self._to_asgi(body)
            super().on_message_complete()
            return
        self._answer_now = None
        status, headers, payload, then = answer
        parts = [STATUS_LINE[status], _default_head(self.server_state.default_headers)]
        for name, value in headers:
            parts += (name, b": ", value, b"\r\n")
        parts += (b"content-length: ", str(len(payload)).encode(), b"\r\n\r\n", payload)
        if self.access_log:
            client = f"{self.client[0]}:{self.client[1]}" if self.client else ""
            self.access_logger.info('%s - "POST %s HTTP/1.1" %d', client, self.url.decode("latin-1"), status)
        # Through the head-holding transport: a head it still holds (a HEAD answer's, until the end
        # of the loop turn) goes first, and an answer it holds goes before anything written later.
        self._turn_writes.write(self.loop, self._holding, b"".join(parts))
        # What uvicorn's on_response_complete does, less what cannot apply here: nothing is
        # pipelined behind this request and reading was not paused for it.
        self.server_state.total_requests += 1
        self._arm_keep_alive()
        if then is not None:
            # With the answer on its way (at one agent, the client is reading it on the other core),
            # or held until the turn ends: either way done before this connection's next request.
            try:
                then()
            except Exception:
                log.exception("work after an immediate answer failed")

    # Keep-alive. uvicorn cancels its keep-alive timer when data arrives and sets a new one after
    # every answer: a timer handle made and dropped per request (5-9 % of a cached prompts/get at
    # c=32). Here one timer per connection is kept: data arriving, and each request beginning
    # (``on_message_begin``: one may begin in the same read as an answered one), mark the
    # connection busy; an answer marks it idle (and since when); and the timer, when due, closes a
    # connection that has been idle for the whole timeout, or is set again for what remains of it.
    def _unset_keepalive_if_required(self) -> None:
        self._idle = False

    def on_response_complete(self) -> None:
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._idle = False
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        else:
            self._arm_keep_alive()

    def _arm_keep_alive(self) -> None:
        self._idle = True
        self._idle_since = self.loop.time()
        if self._keep_alive_timer is None:
            self._keep_alive_timer = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def timeout_keep_alive_handler(self) -> None:
        self._keep_alive_timer = None
        if not self._idle or self.transport.is_closing():
            return  # a request is being received or answered: its answer sets the timer again
        remaining = self._idle_since + self.timeout_keep_alive - self.loop.time()
        if remaining > 0:
            self._keep_alive_timer = self.loop.call_later(remaining, self.timeout_keep_alive_handler)
        else:
            self.transport.close()

    def eof_received(self) -> None:
        """The client has shut its side: uvloop closes the transport itself once this returns
        None (uvicorn's answer), so answers held for the end of the turn are handed over first."""
        self._holding.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self._keep_alive_timer is not None:
            self._keep_alive_timer.cancel()
            self._keep_alive_timer = None

    def shutdown(self) -> None:
        """Graceful shutdown: a request whose body is still being buffered goes to the ASGI app,
        which answers it and closes, as uvicorn does for a request in progress."""
        if self._answer_now is not None:
            self._to_asgi(self._immediate_body)
        super().shutdown()

    def _to_asgi(self, body: bytes) -> None:
        """Hand the request to the ASGI app after all, with what was buffered of its body."""
        self._answer_now = None
        self._immediate_body = b""
        super().on_headers_complete()
        if body:
            super().on_body(body)
