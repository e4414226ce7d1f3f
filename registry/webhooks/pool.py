"""A keep-alive HTTP/1.1 connection pool per origin, as an httpx transport.

Why not httpx's own transport: its pool (httpcore) picks a connection for each request by scanning
*every* connection it holds, asking each whether it has expired, which costs a system call through
several layers of anyio per connection. With 32 tool calls in flight that scan was about a third
of the registry's CPU time in the ``tools/call`` benchmark, and the cost of one call grew with the
number of calls in flight. Here each origin keeps a stack of idle connections: a request takes the
most recently used one (or opens a new one), and gives it back when its response has been read in
full, so the cost of a call does not depend on how many others are running.

It speaks HTTP/1.1 only (webhooks and ``http`` resources are plain services; h11 does the parsing,
so framing, chunked bodies and header limits are a maintained parser's job), follows no redirects
(httpx's client decides that), uses no proxy and reads nothing from the environment. Every *new*
connection is handed to ``guard`` with its peer address before a single byte (or TLS hello) is
written: that is where the SSRF check lives (:mod:`.ssrf`). A reused connection is never checked
again because it is still connected to the peer that was checked.

Limits: at most ``max_connections`` requests in flight (others wait up to the pool timeout), at
most ``max_keepalive_connections`` idle connections kept, each for at most ``keepalive_expiry``
seconds. A connection goes back to the pool only when its response was read to the end and both
sides allow keep-alive; a response closed early, a failure or a cancellation closes it instead.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import h11
import httpx

__all__ = ["ConnectGuard", "PooledTransport"]

#: Called with the host and the connected socket's peer address (``getpeername()`` form) of every
#: new connection, before anything is sent; raising refuses the connection (it is closed).
ConnectGuard = Callable[[str, Any], None]

_DEFAULT_PORTS: Final = {b"http": 80, b"https": 443}
#: Buffered response bytes past which the socket is not read until the reader catches up.
_READ_HIGH_WATER: Final = 256 * 1024
#: The most bytes a response's status line and headers may take (what httpcore allowed before).
_MAX_HEAD_BYTES: Final = 100 * 1024

_Origin = tuple[bytes, bytes, int]


class _Protocol(asyncio.Protocol):
    """Buffers what arrives and lets one reader wait for it; pauses writers when asked to.

    What is buffered is bounded: past :data:`_READ_HIGH_WATER` bytes the socket is no longer read
    (TCP flow control then holds the server back) until the reader has taken most of it, so a
    server cannot fill memory while the caller is busy, say relaying progress to a slow client.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: deque[bytes] = deque()
        self._buffered = 0
        self._reading_paused = False
        self.eof = False
        self.error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None

    # asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self._buffered += len(data)
        if self._buffered > _READ_HIGH_WATER and not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # close the transport: we never write after the server stopped reading

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self._wake()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        if self._drained is None or self._drained.done():
            self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    @property
    def paused(self) -> bool:
        return self._drained is not None and not self._drained.done()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # for the connection
    def take(self) -> bytes:
        """The oldest buffered chunk (there must be one)."""
        chunk = self.chunks.popleft()
        self._buffered -= len(chunk)
        if self._reading_paused and self._buffered <= _READ_HIGH_WATER // 4 and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()
        return chunk

    async def receive(self) -> bytes:
        """The next chunk received, or ``b""`` at the end of the stream."""
        while not self.chunks:
            if self.eof:
                if self.error is not None:
                    raise self.error
                return b""
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self.take()

    async def drain(self) -> None:
        if self.paused:
            assert self._drained is not None
            await self._drained
        if self.error is not None:
            raise self.error


class _Connection:
    """One connection to one origin, with its h11 state; used by one request at a time."""

    __slots__ = ("h11", "idle_since", "origin", "protocol", "transport")

    def __init__(self, origin: _Origin, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self.origin = origin
        self.transport = transport
        self.protocol = protocol
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD_BYTES)
        self.idle_since = 0.0

    def usable(self, now: float, expiry: float) -> bool:
        """Whether an idle connection can carry another request: not expired, not closed by the
        server, and with nothing unexpected received (a server's parting 408, say)."""
        p = self.protocol
        return now - self.idle_since < expiry and not p.eof and not p.chunks and not self.transport.is_closing()

    def close(self) -> None:
        self.transport.close()

    async def send(self, request: httpx.Request, body: bytes, timeout: float | None) -> None:
        """Send the request head and body in one write."""
        try:
            data = self.h11.send(
                h11.Request(method=request.method, target=request.url.raw_path, headers=request.headers.raw)
            )
            data = (data or b"") + (self.h11.send(h11.Data(data=body)) or b"") if body else (data or b"")
            data += self.h11.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError as exc:
            raise httpx.LocalProtocolError(str(exc), request=request) from exc
        try:
            self.transport.write(data)
            if self.protocol.paused:  # most requests fit the transport's buffer: no timer for them
                async with asyncio.timeout(timeout):
                    await self.protocol.drain()
            elif self.protocol.error is not None:
                raise self.protocol.error
        except TimeoutError as exc:
            raise httpx.WriteTimeout("writing the request timed out", request=request) from exc
        except OSError as exc:
            raise httpx.WriteError(str(exc), request=request) from exc

    async def next_event(self, request: httpx.Request, timeout: float | None) -> Any:
        """The next h11 event of the response, reading from the socket as needed."""
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc), request=request) from exc
            if event is h11.NEED_DATA:
                try:
                    if self.protocol.chunks:  # already here: no timer needed
                        data = self.protocol.take()
                    else:
                        async with asyncio.timeout(timeout):
                            data = await self.protocol.receive()
                except TimeoutError as exc:
                    raise httpx.ReadTimeout("reading the response timed out", request=request) from exc
                except OSError as exc:
                    raise httpx.ReadError(str(exc), request=request) from exc
                self.h11.receive_data(data)
                continue
            if isinstance(event, h11.ConnectionClosed):
                raise httpx.RemoteProtocolError("the server closed the connection mid-response", request=request)
            return event


class _ResponseStream(httpx.AsyncByteStream):
    """The raw (still content-encoded) body; closing it returns or closes the connection."""

    def __init__(self, pool: PooledTransport, conn: _Connection, request: httpx.Request, timeout: float | None):
        self._pool = pool
        self._conn = conn
        self._request = request
        self._timeout = timeout
        self._complete = False
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while not self._complete and not self._closed:
            try:
                event = await self._conn.next_event(self._request, self._timeout)
            except BaseException:
                await self.aclose()
                raise
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self._complete = True

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._pool._release(self._conn, reuse=self._complete)


def _timeouts(request: httpx.Request) -> dict[str, float | None]:
    timeouts = request.extensions.get("timeout")
    return timeouts if isinstance(timeouts, dict) else {}


class PooledTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over a pool of keep-alive connections kept per origin (see the module docstring)."""

    def __init__(
        self,
        guard: ConnectGuard,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = 100,
        max_keepalive_connections: int = 100,
        keepalive_expiry: float = 5.0,
    ) -> None:
        if max_connections < 1 or max_keepalive_connections < 0 or keepalive_expiry < 0:
            raise ValueError("max_connections must be positive, the keep-alive limits not negative")
        self._guard = guard
        self._ssl_context = ssl_context
        self._slots = asyncio.Semaphore(max_connections)
        self._max_idle = max_keepalive_connections
        self._expiry = keepalive_expiry
        self._idle: dict[_Origin, deque[_Connection]] = {}
        self._idle_count = 0
        self._closed = False

    # ------------------------------------------------------------------ httpx interface
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the transport is closed")
        url = request.url
        scheme = url.raw_scheme
        if scheme not in _DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}", request=request)
        origin: _Origin = (scheme, url.raw_host, url.port or _DEFAULT_PORTS[scheme])
        timeouts = _timeouts(request)
        if not isinstance(request.stream, httpx.AsyncByteStream):
            raise RuntimeError("PooledTransport needs an httpx.AsyncClient request")
        body = b"".join([chunk async for chunk in request.stream])
        try:
            async with asyncio.timeout(timeouts.get("pool")):
                await self._slots.acquire()
        except TimeoutError as exc:
            raise httpx.PoolTimeout("no connection slot became free in time", request=request) from exc
        conn: _Connection | None = None
        try:
            conn = self._take_idle(origin)
            if conn is None:
                conn = await self._connect(origin, request, timeouts.get("connect"))
            await conn.send(request, body, timeouts.get("write"))
            read_timeout = timeouts.get("read")
            event = await conn.next_event(request, read_timeout)
            while isinstance(event, h11.InformationalResponse):  # 100 Continue and the like
                event = await conn.next_event(request, read_timeout)
        except BaseException:
            if conn is not None:
                conn.close()
            self._slots.release()
            raise
        return httpx.Response(
            status_code=event.status_code,
            headers=list(event.headers.raw_items()),
            stream=_ResponseStream(self, conn, request, read_timeout),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": bytes(event.reason)},
        )

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        self._idle_count = 0

    # ------------------------------------------------------------------ the pool
    def _take_idle(self, origin: _Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = time.monotonic()
        found: _Connection | None = None
        while idle and found is None:
            conn = idle.pop()  # the most recently used: the least likely to have been closed
            self._idle_count -= 1
            if conn.usable(now, self._expiry):
                found = conn
            else:
                conn.close()
        if not idle:
            del self._idle[origin]  # origins come and go: keep no entry for one with nothing idle
        return found

    def _release(self, conn: _Connection, *, reuse: bool) -> None:
        """Called once per request, when its response is closed."""
        self._slots.release()
        h = conn.h11
        if not reuse or self._closed or h.our_state is not h11.DONE or h.their_state is not h11.DONE:
            conn.close()
            return
        try:
            h.start_next_cycle()
        except h11.LocalProtocolError:
            conn.close()
            return
        now = time.monotonic()
        idle = self._idle.setdefault(conn.origin, deque())
        # The oldest idle connections are at the left: drop the expired ones while here, so an
        # origin that is no longer called does not keep its sockets for long.
        while idle and now - idle[0].idle_since >= self._expiry:
            idle.popleft().close()
            self._idle_count -= 1
        if self._idle_count < self._max_idle:
            conn.idle_since = now
            idle.append(conn)
            self._idle_count += 1
        else:
            conn.close()
            if not idle:
                del self._idle[conn.origin]

    async def _connect(self, origin: _Origin, request: httpx.Request, timeout: float | None) -> _Connection:
        scheme, raw_host, port = origin
        host = raw_host.decode("ascii")
        loop = asyncio.get_running_loop()
        transport: asyncio.Transport | None = None
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(_Protocol, host, port)
                try:
                    # Before a single byte (or TLS hello) goes out: the peer that was connected to.
                    self._guard(host, transport.get_extra_info("peername"))
                    if scheme == b"https":
                        context = self._ssl_context or ssl.create_default_context()
                        tls = await loop.start_tls(transport, protocol, context, server_hostname=host)
                        if tls is None:
                            raise httpx.ConnectError("the TLS handshake did not complete", request=request)
                        transport = tls
                except BaseException:
                    transport.close()
                    raise
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("connecting timed out", request=request) from exc
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        return _Connection(origin, transport, protocol)
