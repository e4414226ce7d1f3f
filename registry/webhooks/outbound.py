"""The outbound HTTP client of webhooks and ``http`` resources: aiohttp's, guarded, capped, and
with every failure turned into this module's own small exception family.

This is the one module that knows aiohttp. It owns the session and its connector, and at its
boundary (:meth:`OutboundClient.stream` and the body iterator of :class:`OutboundResponse`) every
aiohttp, OS, SSL and timeout exception becomes one of :class:`OutboundError`'s subclasses, or
:class:`~.ssrf.ForbiddenDestination` for a refused address. Callers (:mod:`.client`,
:mod:`.resources`) map those to the texts agents see (:mod:`.messages`).

**Parsing.** Responses are parsed by aiohttp's llhttp parser with our bounds: a status line of at
most :data:`MAX_LINE_BYTES`, each header field (name and value) of at most :data:`MAX_FIELD_BYTES`,
and at most :data:`MAX_HEADERS` header lines, trailers of a chunked body counted with them, so a
flood of trailers or an endless one ends the call at once. Bodies are read raw (no automatic
decompression: :mod:`.bodies` inflates with a bound) and at most about ``2 * READ_BUFSIZE`` bytes
are read ahead of the reader before the socket stops being read (TCP then holds the sender back).

**What it never does.** Follow redirects (one could point anywhere and would be a second, unsigned
request), keep cookies (one client serves every agent), use a proxy or anything from the
environment (a proxy would make the proxy the peer the guard checks), or speak anything but
HTTP/1.1. A URL's credentials (``https://user:secret@host/``) are sent as Basic authorization and
replace an ``Authorization`` header the entry configures. Hosts are the URL's IDNA-2008 A-label,
as httpx and the save-time check spell them.

**Around it.** The connector (:mod:`.guarded_connector`) carries the SSRF guard and the two
aiohttp workarounds; every call is first admitted against the outbound caps (:mod:`.caps`), and a
call past one is refused at once with :class:`~.caps.CapReached` naming it. aiohttp's own
connection limits are off, so they never queue a call behind another origin's.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import re
import ssl
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Final, overload

import aiohttp
import httpx
from multidict import CIMultiDictProxy
from yarl import URL

from registry import tracing as _tracing
from registry.limits import DEFAULT_LIMITS, Limits

from .caps import OUTBOUND_CALLS, OutboundCalls
from .guarded_connector import Bodies, GuardedConnector, fail_unfinished, find_refusal
from .ssrf import ForbiddenDestination, IPNetwork

if TYPE_CHECKING:
    from aiohttp.client_proto import ResponseHandler

    from registry.tracing.client_spans import ClientSpan, ClientSpans
    from registry.tracing.sdk import Tracing

__all__ = [
    "MAX_FIELD_BYTES",
    "MAX_HEADERS",
    "MAX_LINE_BYTES",
    "READ_BUFSIZE",
    "ConnectFailed",
    "ConnectionLost",
    "InvalidRequest",
    "InvalidURL",
    "OutboundClient",
    "OutboundError",
    "OutboundResponse",
    "OutboundTimeout",
    "ProtocolViolation",
    "ResponseHeaders",
    "make_guarded_client",
]

#: Longest status line of a response.
MAX_LINE_BYTES: Final = 8190
#: Longest header field, name and value together (trailers too).
MAX_FIELD_BYTES: Final = 8190
#: Most header lines of a response, a chunked body's trailers counted with them.
MAX_HEADERS: Final = 128
#: aiohttp's read buffer: past twice this, buffered and unread, the socket is no longer read.
READ_BUFSIZE: Final = 64 * 1024
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Visible ASCII, space and tab: no control characters, nothing aiohttp would have to encode.
_HEADER_VALUE: Final = re.compile(r"[\t\x20-\x7e]*")
#: aiohttp adds these when a request lacks them; the registry sends its own or none.
_NO_AUTO_HEADERS: Final = ("User-Agent", "Accept-Encoding", "Content-Type")


# --------------------------------------------------------------------------- the exception family


class OutboundError(Exception):
    """An outbound call could not be made or completed. The message is for logs (it may name an
    address); what an agent is told comes from :func:`~.messages.transport_failure`, which also
    reads the OS, DNS and TLS errors chained as the cause."""


class InvalidURL(OutboundError):
    """The URL cannot be called (no host, a scheme other than http(s), malformed)."""


class InvalidRequest(OutboundError):
    """A method or header cannot be sent; the message names the header, never its value."""


class OutboundTimeout(OutboundError):
    """Connecting, or waiting for the next bytes of the answer, took longer than the timeout."""


class ConnectFailed(OutboundError):
    """No connection: the name does not resolve, the connection was refused, TLS failed."""


class ProtocolViolation(OutboundError):
    """The server broke HTTP: an invalid or oversized head, a body cut short of its framing,
    trailers past the bounds, a close before any answer."""


class ConnectionLost(OutboundError):
    """The connection failed in the middle of the exchange (reset, broken pipe)."""


def _translate(exc: Exception, host: str, protocol: ResponseHandler | None = None) -> Exception | None:
    """The registry's exception for an aiohttp, OS, SSL or timeout one (None: let it propagate),
    with ``exc`` as its cause (where :func:`~.messages.transport_failure` finds an errno, a DNS or
    a TLS error to name). Raise it as it is.

    ``protocol`` is the connection's, once the head has arrived: a body cut short by a reset is
    then told apart from one cut short by a close (aiohttp reports both as a payload error)."""
    refused = find_refusal(exc)
    if refused is not None:
        return _caused(refused.forbidden(host), None)
    if isinstance(exc, ForbiddenDestination):
        return _caused(ForbiddenDestination(host, exc.address, exc.reason), None)
    if isinstance(exc, aiohttp.ClientPayloadError):
        lost = protocol.exception() if protocol is not None else None
        if isinstance(lost, OSError):  # a reset, not the server's orderly close
            return _caused(ConnectionLost(str(lost)), lost)
    mapped = _mapped(exc, host)
    return None if mapped is None else _caused(mapped, exc)


def _caused(exc: Exception, cause: BaseException | None) -> Exception:
    exc.__cause__ = cause
    exc.__suppress_context__ = True
    return exc


def _mapped(exc: Exception, host: str) -> OutboundError | None:
    if isinstance(exc, TimeoutError):  # aiohttp's connect and read timeouts included
        return OutboundTimeout(f"{host}: timed out")
    if isinstance(exc, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        return InvalidURL(str(exc))
    if isinstance(exc, aiohttp.ClientConnectorError):  # DNS, refused, TLS (the cause says which)
        return ConnectFailed(str(exc))
    if isinstance(exc, aiohttp.ClientPayloadError):
        return ProtocolViolation(str(exc))
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return ProtocolViolation(f"{host} closed the connection without answering")
    if isinstance(exc, aiohttp.ClientResponseError):  # the head could not be parsed
        return ProtocolViolation(str(exc))
    if isinstance(exc, aiohttp.ClientError | OSError):  # ssl.SSLError is an OSError
        return ConnectionLost(str(exc) or type(exc).__name__)
    if isinstance(exc, ValueError):  # aiohttp's own checks of what it is asked to send
        return InvalidRequest("the request could not be built")
    return None


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class _Target:
    #: ``scheme://host:port``: the key of the per-origin cap.
    origin: str
    #: The host as messages name it (the A-label; an IPv6 address without brackets).
    host: str
    #: The URL aiohttp is given: A-label host, no userinfo, no fragment, already encoded.
    url: URL
    #: ``Basic ...`` for a URL with credentials.
    authorization: str | None


@functools.lru_cache(maxsize=1024)
def _target(url: str) -> _Target:
    """Parsed once per URL (a catalog calls a few URLs many times), with httpx, so that the call
    sees the URL exactly as the save-time check and the messages do."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise InvalidURL("the URL is not valid") from None
    scheme = parsed.scheme
    if scheme not in _DEFAULT_PORTS:
        raise InvalidURL(f"unsupported URL scheme {scheme!r}")
    host = parsed.raw_host.decode("ascii")
    if not host:
        raise InvalidURL("the URL has no host")
    port = parsed.port or _DEFAULT_PORTS[scheme]
    netloc = parsed.netloc.decode("ascii")  # host[:port], IPv6 bracketed, never the userinfo
    try:
        target = URL(f"{scheme}://{netloc}{parsed.raw_path.decode('ascii')}", encoded=True)
    except (TypeError, ValueError):
        raise InvalidURL("the URL is not valid") from None
    authorization = None
    if parsed.userinfo:
        credentials = base64.b64encode(f"{parsed.username}:{parsed.password}".encode()).decode("ascii")
        authorization = f"Basic {credentials}"
    return _Target(f"{scheme}://{host}:{port}", host, target, authorization)


def _request_headers(headers: Iterable[tuple[str, str]], authorization: str | None) -> list[tuple[str, str]]:
    """The headers to send, checked: a name that is not a token or a value with a control (or
    non-ASCII) character is refused without quoting the value, which is often a credential."""
    checked: list[tuple[str, str]] = []
    for name, value in headers:
        if not _TOKEN.fullmatch(name) or not _HEADER_VALUE.fullmatch(value):
            raise InvalidRequest(f"invalid request header {name!r}")
        if authorization is not None and name.lower() == "authorization":
            continue  # the URL's credentials win
        checked.append((name, value))
    if authorization is not None:
        checked.append(("Authorization", authorization))
    return checked


@functools.lru_cache(maxsize=64)
def _timeouts(seconds: float | None) -> aiohttp.ClientTimeout:
    """Connecting, and each wait for more of the answer, within ``seconds`` (callers bound the
    whole call with a deadline of their own)."""
    return aiohttp.ClientTimeout(total=None, connect=seconds, sock_read=seconds)


# --------------------------------------------------------------------------- the connector

# --------------------------------------------------------------------------- responses


class ResponseHeaders:
    """A response's headers by case-insensitive name; a repeated one joined with ", " (as HTTP
    allows for all but Set-Cookie, which nothing here reads)."""

    __slots__ = ("raw",)

    def __init__(self, raw: CIMultiDictProxy[str]) -> None:
        self.raw = raw

    @overload
    def get(self, name: str) -> str | None: ...

    @overload
    def get(self, name: str, default: str) -> str: ...

    def get(self, name: str, default: str | None = None) -> str | None:
        values = self.raw.getall(name, None)
        if not values:
            return default
        return values[0] if len(values) == 1 else ", ".join(values)

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.raw


class OutboundResponse:
    """A response whose body is read as it arrives (:meth:`aiter_raw`: still content-encoded).
    Closing it leaves the connection to be kept alive for reuse if the body was read to its end, else
    closes the connection."""

    __slots__ = (
        "_bodies",
        "_closed",
        "_done",
        "_host",
        "_protocol",
        "_response",
        "headers",
        "reason_phrase",
        "status_code",
    )

    def __init__(self, response: aiohttp.ClientResponse, host: str, bodies: Bodies) -> None:
        self._response = response
        self._host = host
        self._bodies = bodies
        connection = response.connection
        self._protocol = connection.protocol if connection is not None else None
        if self._protocol is not None and not response.content.is_eof():
            bodies[self._protocol] = response.content
            fail_unfinished(self._protocol, response.content)
        self._done = False
        self._closed = False
        self.status_code = response.status
        self.reason_phrase = response.reason or ""
        self.headers = ResponseHeaders(response.headers)

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def is_redirect(self) -> bool:
        return self.status_code in _REDIRECTS and "location" in self.headers

    def _close_delimited(self) -> bool:
        """Whether the body ends only with the connection (no length, not chunked)."""
        if self._response.method == "HEAD" or self.status_code in (204, 304) or "content-length" in self.headers:
            return False
        codings = self.headers.get("transfer-encoding", "")
        return codings.rsplit(",", 1)[-1].strip().lower() != "chunked"

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        content = self._response.content
        while not self._done and not self._closed:
            try:
                chunk = await content.readany()
            except Exception as exc:
                mapped = _translate(exc, self._host, self._protocol)
                if mapped is None:
                    raise
                raise mapped  # noqa: B904 (its cause is set: the error an agent's message names)
            if chunk:
                yield chunk
                continue
            self._done = True
            # A body that ends with its connection ends the same way when the connection is
            # reset: only the protocol's error tells a cut-short body from a whole one.
            lost = self._protocol.exception() if self._protocol is not None else None
            if isinstance(lost, OSError) and self._close_delimited():
                raise ConnectionLost(str(lost)) from lost

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_raw()])

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._protocol is not None and self._bodies.get(self._protocol) is self._response.content:
                del self._bodies[self._protocol]
            if self._done:
                self._response.release()  # aiohttp keeps it alive for reuse if it may be
            else:
                self._response.close()  # unread: the connection cannot carry another request

    async def aclose(self) -> None:
        self.close()


# --------------------------------------------------------------------------- the client


class _Exchange:
    """``async with client.stream(...) as response``: admitted against the caps before anything is
    sent; the response closed and the call released on every way out, cancellation included."""

    __slots__ = (
        "_caller",
        "_client",
        "_content",
        "_headers",
        "_method",
        "_released",
        "_response",
        "_span",
        "_target",
        "_timeout",
    )

    def __init__(
        self,
        client: OutboundClient,
        method: str,
        url: str,
        content: bytes,
        headers: Sequence[tuple[str, str]],
        timeout: float | None,
        caller: str | None,
    ) -> None:
        self._client = client
        self._method = method
        self._target = url
        self._content = content
        self._headers = headers
        self._timeout = timeout
        self._caller = caller
        self._response: OutboundResponse | None = None
        self._released: Callable[[], None] | None = None
        self._span: ClientSpan | None = None

    async def __aenter__(self) -> OutboundResponse:
        client = self._client
        if not _TOKEN.fullmatch(self._method):
            raise InvalidRequest(f"invalid request method {self._method!r}")
        target = _target(self._target)
        headers = _request_headers(self._headers, target.authorization)
        session = client._session()
        calls, origin, caller = client.calls, target.origin, self._caller
        calls.admit(origin, caller, client.limits)
        self._released = functools.partial(calls.release, origin, caller)
        try:
            if client.spans is not None:  # tracing on: a client span, its context in the headers
                url = target.url
                port = url.port or _DEFAULT_PORTS[url.scheme]
                self._span, headers = client.spans.start(
                    self._method, url.scheme, target.host, port, url.raw_path, headers
                )
            try:
                answer = await session.request(
                    self._method,
                    target.url,
                    data=self._content or None,
                    headers=headers,
                    allow_redirects=False,
                    timeout=_timeouts(self._timeout),
                )
            except Exception as exc:
                mapped = _translate(exc, target.host)
                if mapped is None:
                    raise
                raise mapped  # noqa: B904 (its cause is set: the error an agent's message names)
            response = self._response = OutboundResponse(answer, target.host, client._bodies)
            if self._span is not None:
                self._span.answered(answer.status)
            if client.on_response is not None:
                client.on_response(response)
        except BaseException as exc:
            if self._span is not None:
                self._span.failed(exc)
            await self.__aexit__(None, None, None)  # __aexit__ is not called when __aenter__ raises
            raise
        return response

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._response is not None:
                self._response.close()
        finally:
            released, self._released = self._released, None
            if released is not None:
                released()
            span, self._span = self._span, None
            if span is not None:
                span.end(exc)


class OutboundClient:
    """What callers hold: :meth:`stream` one request at a time, with a default timeout. One
    instance serves every agent's calls; its aiohttp session is made on first use, on the event
    loop that uses it."""

    def __init__(
        self,
        allowed: Iterable[IPNetwork] = (),
        *,
        ssl_context: ssl.SSLContext,
        timeout: float | None = 30.0,
        limits: Limits = DEFAULT_LIMITS,
        calls: OutboundCalls = OUTBOUND_CALLS,
        tracing: Tracing | None = None,
    ) -> None:
        self.allowed = tuple(allowed)
        #: Client spans of every call (None: tracing off, and nothing of OpenTelemetry is imported).
        self.spans: ClientSpans | None = None
        if tracing is not None:
            from registry.tracing.client_spans import ClientSpans

            self.spans = ClientSpans(tracing)
        self.timeout = timeout
        self.limits = limits
        self.calls = calls
        self._ssl_context = ssl_context
        self._http: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._bodies: Bodies = weakref.WeakKeyDictionary()
        self._closed = False
        #: Told of every response as its head arrives (what a fetch heard, for the editor's view).
        self.on_response: Callable[[OutboundResponse], None] | None = None

    def _session(self) -> aiohttp.ClientSession:
        session = self._http
        if session is not None and self._loop is not asyncio.get_running_loop():
            raise RuntimeError("an outbound client serves the event loop it was first used on")
        if session is None:
            if self._closed:
                raise RuntimeError("the HTTP client is closed")
            self._loop = asyncio.get_running_loop()
            connector = GuardedConnector(self.allowed, self._ssl_context)
            self._bodies = connector.bodies
            session = self._http = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
                auto_decompress=False,
                skip_auto_headers=_NO_AUTO_HEADERS,
                timeout=_timeouts(self.timeout),
                read_bufsize=READ_BUFSIZE,
                max_line_size=MAX_LINE_BYTES,
                max_field_size=MAX_FIELD_BYTES,
                max_headers=MAX_HEADERS,
            )
        return session

    def stream(
        self,
        method: str,
        url: str,
        *,
        content: bytes = b"",
        headers: Sequence[tuple[str, str]] = (),
        timeout: float | None = None,
        caller: str | None = None,
    ) -> _Exchange:
        """One request; its response once the head is in. ``caller`` (:func:`caller_key`) is
        whose call it is, for the per-caller cap (None: counted in all and per origin only).

        Raises :class:`CapReached` (a :class:`~registry.limits.LimitExceeded`) past a cap,
        :class:`ForbiddenDestination` for a refused address, an :class:`OutboundError` for
        everything else that goes wrong."""
        return _Exchange(self, method, url, content, headers, self.timeout if timeout is None else timeout, caller)

    @property
    def is_closed(self) -> bool:
        return self._closed

    async def aclose(self) -> None:
        self._closed = True
        session, self._http = self._http, None
        if session is not None:
            await session.close()

    async def __aenter__(self) -> OutboundClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def make_guarded_client(
    allowed: Iterable[IPNetwork] = (),
    *,
    timeout: float | None = 30.0,
    verify: ssl.SSLContext | str | bool = True,
    limits: Limits = DEFAULT_LIMITS,
    calls: OutboundCalls = OUTBOUND_CALLS,
    tracing: Tracing | None = None,
) -> OutboundClient:
    """The client for webhook calls and ``http`` resources: SSRF-guarded (``allowed`` networks
    opened), no redirects, no cookies, no proxies or other settings from the environment, the
    outbound caps of ``limits`` counted in ``calls`` (the process's, unless told otherwise), each
    call a client span of ``tracing`` (None: the process's, :func:`registry.tracing.active`)."""
    return OutboundClient(
        allowed,
        ssl_context=httpx.create_ssl_context(verify=verify, trust_env=False),
        timeout=timeout,
        limits=limits,
        calls=calls,
        tracing=tracing or _tracing.active(),
    )
