"""The outbound HTTP/1.1 client of webhooks and ``http`` resources: a keep-alive pool per origin.

Why a client of its own, in two steps:

- httpx's pool (httpcore) picks a connection for each request by scanning *every* connection it
  holds, asking each whether it has expired, which costs a system call through several layers of
  anyio per connection: with 32 tool calls in flight that scan was about a third of the registry's
  CPU time in the ``tools/call`` benchmark, and a call's cost grew with the calls in flight. Here
  each origin keeps a stack of idle connections: a request takes the most recently used one (or
  opens a new one), and gives it back when its response has been read in full.
- With that fixed, httpx's client layers (request building, auth and redirect hooks, its models)
  and h11's pure-Python parsing still cost about 520 µs of CPU per webhook call, against 33 µs for
  the socket round trip itself (measured in process at 32 calls in flight). So requests are written
  here in one piece and responses are parsed by httptools (llhttp, the C parser uvicorn's server
  side uses): framing, chunked bodies and keep-alive are still a maintained parser's job.

What it does not do: HTTP/2, proxies, redirects (never followed: a redirect could point anywhere
and would be a second, unsigned request), cookies (one client serves every agent, so a jar would
hand one agent's cookie to the next), or anything from the environment. Every *new* connection is
handed to ``guard`` with its peer address before a single byte (or TLS hello) is written: that is
where the SSRF check lives (:mod:`.ssrf`). A reused connection is never checked again because it is
still connected to the peer that was checked. Failures raise httpx's exception classes
(``httpx.ConnectError``, ``httpx.ReadTimeout``, ...), which callers already map to messages.

Limits: at most ``max_connections`` requests in flight (others wait up to the pool timeout), at
most ``max_keepalive_connections`` idle connections kept, each for at most ``keepalive_expiry``
seconds; a response head of at most 100 KiB; at most 256 KiB of body buffered ahead of the reader
(past it the socket is not read, so TCP holds the server back). A connection goes back to the pool
only when its response was read to the end and both sides allow keep-alive; a response closed
early, a failure or a cancellation closes it instead.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import re
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Final, overload

import httptools
import httpx

__all__ = ["ConnectGuard", "ConnectionPool", "PooledClient", "PooledResponse", "ResponseHeaders"]

#: Called with the host and the connected socket's peer address (``getpeername()`` form) of every
#: new connection, before anything is sent; raising refuses the connection (it is closed).
ConnectGuard = Callable[[str, Any], None]

#: A request's timeouts: one number for every phase, or httpx's per-phase ``Timeout``.
Timeouts = float | httpx.Timeout | None

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
#: Buffered response bytes past which the socket is not read until the reader catches up.
_READ_HIGH_WATER: Final = 256 * 1024
#: The most bytes a response's status line and headers may take.
_MAX_HEAD_BYTES: Final = 100 * 1024
_HEADER_NAME: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Visible characters, space and tab (RFC 9110 field-value, obs-text included): no control characters.
_HEADER_VALUE: Final = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_NO_BODY_STATUSES: Final = frozenset({204, 304})

_Origin = tuple[str, str, int]
#: Status, reason phrase and raw headers of a response.
_Head = tuple[int, bytes, list[tuple[bytes, bytes]]]


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a head past :data:`_MAX_HEAD_BYTES`."""


class ResponseHeaders:
    """A response's headers by case-insensitive name; repeated ones joined with ", " (as HTTP
    allows for all but Set-Cookie, which nothing here reads). ``raw`` keeps them as received."""

    __slots__ = ("_by_name", "raw")

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self.raw = raw
        by_name: dict[str, str] = {}
        for name, value in raw:
            key = name.decode("latin-1").lower()
            text = value.decode("latin-1").strip()
            by_name[key] = f"{by_name[key]}, {text}" if key in by_name else text
        self._by_name = by_name

    @overload
    def get(self, name: str) -> str | None: ...

    @overload
    def get(self, name: str, default: str) -> str: ...

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._by_name.get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return self._by_name[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._by_name

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)


class _Protocol(asyncio.Protocol):
    """One connection's socket and its response parser; one reader waits on it at a time.

    httptools calls the ``on_*`` methods from ``feed_data``. What is buffered is bounded: past
    :data:`_READ_HIGH_WATER` bytes the socket is no longer read until the reader has taken most of
    it, so a server cannot fill memory while the caller is busy (relaying progress to a slow client,
    say). Bytes that arrive when no response is expected (a server's parting 408, a second answer)
    mark the connection unusable.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        #: A request was sent and its response is not complete yet.
        self.expecting = False
        #: The request was a HEAD: its response has headers only, whatever they announce.
        self.head_only = False
        self.head: _Head | None = None
        self.complete = False
        self.keep_alive = False
        self.unexpected = False
        self.eof = False
        self.error: BaseException | None = None
        self.body: deque[bytes] = deque()
        self._buffered = 0
        self._head_bytes = 0
        self._head_parsed = 0
        self._reason = b""
        self._raw_headers: list[tuple[bytes, bytes]] = []
        self._informational = False
        self._until_close = False
        self._reading_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None

    def expect(self, head_only: bool) -> None:
        """A request is about to be written on this connection: parse its response."""
        self.expecting = True
        self.head_only = head_only
        self.head = None
        self.complete = False
        self.keep_alive = False
        self._head_bytes = 0
        self._head_parsed = 0

    # ------------------------------------------------------------------ asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes

    def data_received(self, data: bytes) -> None:
        if not self.expecting or self.complete or self.error is not None:
            self.unexpected = True  # nobody asked for these bytes: never reuse this connection
            self._wake()
            return
        if self.head is None:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.error = httpx.RemoteProtocolError("the server switched protocols")
        except httptools.HttpParserError as exc:
            if self.error is None:  # (a callback may have set a better one)
                self.error = httpx.RemoteProtocolError(f"invalid HTTP response: {exc}")
        if self.head is None and self._head_bytes > _MAX_HEAD_BYTES and self.error is None:
            self.error = httpx.RemoteProtocolError(f"the response head is larger than {_MAX_HEAD_BYTES} bytes")
        self._wake()

    def eof_received(self) -> bool:
        self._at_eof()
        return False  # close the transport: we never write after the server stopped reading

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self.error is None and not self.complete:
            self.error = exc
        self._at_eof()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        if self._drained is None or self._drained.done():
            self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def _at_eof(self) -> None:
        self.eof = True
        if self.head is not None and self._until_close and not self.complete and self.error is None:
            self.complete = True  # a body without a length ends when the connection does
        self._wake()

    # ------------------------------------------------------------------ parser callbacks
    def on_message_begin(self) -> None:
        self._reason = b""
        self._raw_headers = []

    def _count_head(self, n: int) -> None:
        if self.head is None:  # (trailers are not part of the head)
            self._head_parsed += n
            if self._head_parsed > _MAX_HEAD_BYTES:
                self.error = httpx.RemoteProtocolError(f"the response head is larger than {_MAX_HEAD_BYTES} bytes")
                raise _HeadTooLarge

    def on_status(self, data: bytes) -> None:
        self._count_head(len(data) + 16)
        self._reason += data

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)
        self._raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if self.complete:  # a second message after ours (or a HEAD answer's): not ours
            self.unexpected = True
            return
        if 100 <= status < 200:  # 100 Continue and the like: the real answer follows
            self._informational = True
            return
        headers = self._raw_headers
        self.head = (status, self._reason, headers)
        self._raw_headers = []  # a chunked body's trailers, if any, go here: they are not headers
        codings = b",".join(value for name, value in headers if name.lower() == b"transfer-encoding")
        if status in _NO_BODY_STATUSES:
            framed = True
        elif codings:  # RFC 9112 6.3: a final coding other than chunked is read until close (as llhttp does)
            framed = codings.rsplit(b",", 1)[-1].strip().lower() == b"chunked"
        else:
            framed = any(name.lower() == b"content-length" for name, _ in headers)
        self._until_close = not framed
        if self.head_only:  # no body follows, whatever the headers say; llhttp cannot be told
            self.complete = True

    def on_body(self, data: bytes) -> None:
        if self.complete:
            return
        self.body.append(data)
        self._buffered += len(data)
        if self._buffered > _READ_HIGH_WATER and not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        if self.complete:  # a HEAD answer's announced body, or a second message: not ours
            self.unexpected = True
            return
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive() and not self._until_close

    # ------------------------------------------------------------------ for the reader
    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait(self, timeout: float | None) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await self._waiter
        finally:
            self._waiter = None

    def _raise_error(self) -> None:
        error = self.error
        assert error is not None
        if isinstance(error, httpx.HTTPError):
            raise error
        raise httpx.ReadError(str(error) or type(error).__name__) from error

    async def _more(self, timeout: float | None, closed: str) -> None:
        """Wait for the reader's next bytes (or the end): a recorded error raises, as does an end of
        the stream (``closed`` says what it cut short) or ``timeout`` passing with nothing new."""
        if self.error is not None:
            self._raise_error()
        if self.eof:
            raise httpx.RemoteProtocolError(closed)
        try:
            await self._wait(timeout)
        except TimeoutError:
            raise httpx.ReadTimeout("reading the response timed out") from None

    async def read_head(self, timeout: float | None) -> _Head:
        """Status, reason and raw headers of the response, once they are in."""
        while self.head is None:
            await self._more(timeout, "the server closed the connection without answering")
        return self.head

    async def read_body(self, timeout: float | None) -> bytes | None:
        """The next piece of the body, or None once it has all been read."""
        while not self.body:
            if self.complete:
                return None
            await self._more(timeout, "the server closed the connection mid-response")
        chunk = self.body.popleft()
        self._buffered -= len(chunk)
        if self._reading_paused and self._buffered <= _READ_HIGH_WATER // 4 and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()
        return chunk

    async def drain(self, timeout: float | None) -> None:
        """Wait until the transport has room again (only when it asked the writer to pause)."""
        if self._drained is not None and not self._drained.done():
            try:
                async with asyncio.timeout(timeout):
                    await self._drained
            except TimeoutError:
                raise httpx.WriteTimeout("writing the request timed out") from None
        if self.error is not None and not self.complete:
            raise httpx.WriteError(str(self.error) or type(self.error).__name__) from self.error


class _Connection:
    """One connection to one origin; carries one request at a time."""

    __slots__ = ("idle_since", "origin", "protocol", "transport")

    def __init__(self, origin: _Origin, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self.origin = origin
        self.transport = transport
        self.protocol = protocol
        self.idle_since = 0.0

    def usable(self, now: float, expiry: float) -> bool:
        """Whether an idle connection can carry another request: not expired, not closed by the
        server, and with nothing unexpected received (a server's parting 408, say)."""
        p = self.protocol
        return now - self.idle_since < expiry and not p.eof and not p.unexpected and not self.transport.is_closing()

    def reusable(self) -> bool:
        p = self.protocol
        return p.complete and p.keep_alive and not p.unexpected and p.error is None and not p.eof

    def close(self) -> None:
        self.transport.close()


class PooledResponse:
    """A response whose body is read as it arrives (``aiter_raw``: still content-encoded).
    Closing it gives the connection back to the pool, or closes it if the body was not read."""

    __slots__ = ("_closed", "_conn", "_done", "_pool", "_timeout", "headers", "reason_phrase", "status_code")

    def __init__(self, pool: ConnectionPool, conn: _Connection, head: _Head, timeout: float | None) -> None:
        self._pool = pool
        self._conn = conn
        self._timeout = timeout
        self._done = False
        self._closed = False
        self.status_code = head[0]
        self.reason_phrase = head[1].decode("latin-1")
        self.headers = ResponseHeaders(head[2])

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def is_redirect(self) -> bool:
        return self.status_code in _REDIRECTS and "location" in self.headers

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        protocol = self._conn.protocol
        while not self._done and not self._closed:
            try:
                chunk = await protocol.read_body(self._timeout)
            except BaseException:
                await self.aclose()
                raise
            if chunk is None:
                self._done = True
            else:
                yield chunk

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_raw()])

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._pool._release(self._conn, reuse=self._done)


def _phase_timeouts(timeout: Timeouts) -> tuple[float | None, float | None, float | None, float | None]:
    """(connect, write, read, pool) seconds."""
    if isinstance(timeout, httpx.Timeout):
        return timeout.connect, timeout.write, timeout.read, timeout.pool
    return timeout, timeout, timeout, timeout


@functools.lru_cache(maxsize=1024)
def _parse_url(url: str) -> tuple[_Origin, bytes, bool]:
    """(origin, request head up to the end of the Host line, whether that head carries the URL's
    credentials) of a URL; catalogs call a few URLs many times, so each is parsed once.

    Credentials in the URL (``https://user:secret@host/``) are sent as Basic authorization, as
    httpx did, and replace an ``Authorization`` header the entry also configures."""
    parsed = httpx.URL(url)
    scheme = parsed.scheme
    if scheme not in _DEFAULT_PORTS:
        raise httpx.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}")
    if not parsed.host:
        raise httpx.InvalidURL("the URL has no host")
    # The A-label (IDNA 2008, as httpx and the save-time check spell it): ``parsed.host`` is the
    # Unicode form, which the resolver and ssl would encode with Python's IDNA 2003 codec.
    origin: _Origin = (scheme, parsed.raw_host.decode("ascii"), parsed.port or _DEFAULT_PORTS[scheme])
    head = b" " + parsed.raw_path + b" HTTP/1.1\r\nHost: " + parsed.netloc + b"\r\n"
    if not parsed.userinfo:
        return origin, head, False
    credentials = base64.b64encode(f"{parsed.username}:{parsed.password}".encode())
    return origin, head + b"Authorization: Basic " + credentials + b"\r\n", True


def _request_bytes(
    method: str, url_head: bytes, headers: Sequence[tuple[str, str]], body: bytes, url_auth: bool
) -> bytes:
    raw_method = method.encode("latin-1", "replace")
    if not _HEADER_NAME.fullmatch(raw_method):  # a method is a token, as a header name is
        raise httpx.LocalProtocolError(f"invalid request method {method!r}")
    parts = [raw_method, url_head]
    for name, value in headers:
        try:
            raw_name, raw_value = name.encode("latin-1"), value.encode("latin-1")
        except UnicodeEncodeError:
            raw_name = raw_value = b"\n"
        # Never the value in the message: header values are often credentials.
        if not _HEADER_NAME.fullmatch(raw_name) or not _HEADER_VALUE.fullmatch(raw_value):
            raise httpx.LocalProtocolError(f"invalid request header {name!r}")
        if url_auth and raw_name.lower() == b"authorization":
            continue  # the URL's credentials win
        parts += (raw_name, b": ", raw_value, b"\r\n")
    if body or method not in ("GET", "HEAD"):
        parts.append(b"Content-Length: %d\r\n" % len(body))
    parts += (b"\r\n", body)
    return b"".join(parts)


class ConnectionPool:
    """HTTP/1.1 exchanges over keep-alive connections kept per origin (see the module docstring)."""

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
        self.closed = False

    async def request(
        self, method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes, timeout: Timeouts
    ) -> PooledResponse:
        """Send a request and return its response once the head is in; the caller closes it."""
        if self.closed:
            raise RuntimeError("the HTTP client is closed")
        origin, url_head, url_auth = _parse_url(url)
        data = _request_bytes(method, url_head, headers, body, url_auth)
        connect_s, write_s, read_s, pool_s = _phase_timeouts(timeout)
        if self._slots.locked():
            try:
                async with asyncio.timeout(pool_s):
                    await self._slots.acquire()
            except TimeoutError:
                raise httpx.PoolTimeout("no connection slot became free in time") from None
        else:
            await self._slots.acquire()  # free: returns at once
        conn: _Connection | None = None
        try:
            conn = self._take_idle(origin)
            if conn is None:
                conn = await self._connect(origin, connect_s)
            protocol = conn.protocol
            protocol.expect(head_only=method == "HEAD")
            try:
                conn.transport.write(data)
            except OSError as exc:
                raise httpx.WriteError(str(exc)) from exc
            if protocol._drained is not None or protocol.error is not None:
                await protocol.drain(write_s)
            head = protocol.head or await protocol.read_head(read_s)
        except BaseException:
            if conn is not None:
                conn.close()
            self._slots.release()
            raise
        return PooledResponse(self, conn, head, read_s)

    async def aclose(self) -> None:
        self.closed = True
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
        if not reuse or self.closed or not conn.reusable():
            conn.close()
            return
        conn.protocol.expecting = False
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

    async def _connect(self, origin: _Origin, timeout: float | None) -> _Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        transport: asyncio.Transport | None = None
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(_Protocol, host, port)
                try:
                    # Before a single byte (or TLS hello) goes out: the peer that was connected to.
                    self._guard(host, transport.get_extra_info("peername"))
                    if scheme == "https":
                        context = self._ssl_context or ssl.create_default_context()
                        tls = await loop.start_tls(transport, protocol, context, server_hostname=host)
                        if tls is None:
                            raise httpx.ConnectError("the TLS handshake did not complete")
                        transport = protocol.transport = tls  # pausing reads pauses the TLS stream
                except BaseException:
                    transport.close()
                    raise
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("connecting timed out") from exc
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        return _Connection(origin, transport, protocol)


class _Exchange:
    """``async with client.stream(...) as response``: the response is closed on every way out."""

    __slots__ = ("_args", "_client", "_response")

    def __init__(self, client: PooledClient, args: tuple[str, str, Sequence[tuple[str, str]], bytes, Timeouts]) -> None:
        self._client = client
        self._args = args
        self._response: PooledResponse | None = None

    async def __aenter__(self) -> PooledResponse:
        response = self._response = await self._client.pool.request(*self._args)
        if self._client.on_response is not None:
            try:
                self._client.on_response(response)
            except BaseException:
                await response.aclose()  # __aexit__ is not called when __aenter__ raises
                raise
        return response

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._response is not None:
            await self._response.aclose()


class PooledClient:
    """The client callers hold: ``stream()`` one request at a time over a :class:`ConnectionPool`,
    with a default timeout. One instance serves every agent's calls."""

    def __init__(self, pool: ConnectionPool, *, timeout: Timeouts = 30.0) -> None:
        self.pool = pool
        self.timeout = timeout
        #: Told of every response as its head arrives (what a fetch heard, for the editor's view).
        self.on_response: Callable[[PooledResponse], None] | None = None

    def stream(
        self,
        method: str,
        url: str | httpx.URL,
        *,
        content: bytes = b"",
        headers: Sequence[tuple[str, str]] = (),
        timeout: Timeouts = None,
    ) -> _Exchange:
        return _Exchange(self, (method, str(url), headers, content, self.timeout if timeout is None else timeout))

    @property
    def is_closed(self) -> bool:
        return self.pool.closed

    async def aclose(self) -> None:
        await self.pool.aclose()

    async def __aenter__(self) -> PooledClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
