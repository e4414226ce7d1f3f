"""aiohttp's connector with the SSRF guard on every connection, and two aiohttp bugs worked around.

**The SSRF guard, twice over** (:mod:`.ssrf` decides what is forbidden). The resolver refuses a host
when *any* address it resolves to is forbidden (the save-time rule), so only vetted addresses are
connected to; aiohttp does not ask the resolver about IP-literal hosts, so the connector's socket
factory checks the address of every socket before it connects, which covers
``http://127.0.0.1/`` and ``http://[::ffff:10.0.0.1]/``; and a new connection's peer address is
checked once more before a request byte is written. A refusal travels through aiohttp as
:class:`Refused`, which :mod:`.outbound` turns back into :class:`~.ssrf.ForbiddenDestination`.

**aio-libs/aiohttp#13656.** aiohttp hands a kept-alive connection to the next request without
looking at what arrived while it sat idle: a server that sends a complete second response a
moment after the first has that response delivered as the *next* caller's answer.
:meth:`GuardedConnector.connect` (aiohttp's documented ``BaseConnector.connect``, arguments passed
through) closes and skips a reused connection whose protocol says it should close (which includes
"something is queued on it"). A partial second response stays in the old parser, which aiohttp
replaces before the next request: the next caller never sees it.

**A body left waiting after a parse error.** When an answer breaks HTTP after its head was handed
on (an endless trailer, a bad chunk size in a later read), aiohttp closes the connection but does
not fail the body's reader, and drops its read timeout: the call would wait for its whole
deadline. The connector watches each new connection's end and fails the body still being read on
it (:func:`_connection_ended`), so such a call ends at once with a protocol error.

Both workarounds read aiohttp's connection protocol (``should_close``, ``closed``, ``exception()``)
beyond its documented API: aiohttp is pinned to the release line they were tested on
(``pyproject.toml``), and ``tests/webhooks/test_hostile_webhooks.py`` and
``tests/webhooks/test_webhook_framing.py`` fail if either stops working.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import ipaddress
import socket
import ssl
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, TypeAlias

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from .ssrf import ConnectedPeerGuard, ForbiddenDestination, IPNetwork, forbidden_reason

if TYPE_CHECKING:
    from aiohttp.client_proto import ResponseHandler
    from aiohttp.connector import Connection
    from aiohttp.tracing import Trace

__all__ = ["KEEPALIVE_S", "Bodies", "GuardedConnector", "Refused", "fail_unfinished", "find_refusal"]

#: Seconds an idle connection is kept for its origin's next call.
KEEPALIVE_S: Final = 5.0
_AI_ADDRCONFIG: Final = socket.AI_ADDRCONFIG & getattr(socket, "AI_MASK", socket.AI_ADDRCONFIG)
_NUMERIC_FLAGS: Final = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV


class Refused(OSError):
    """A forbidden address met in the resolver, the socket factory or the peer check.

    An ``OSError`` so that aiohappyeyeballs treats it as the failure of that one address: any
    other exception raised from a socket factory is swallowed when a host has several addresses
    (and an ``IndexError`` comes out instead). aiohttp wraps it in ``ClientConnectorError``;
    :func:`_translate` finds it in the chain and raises :class:`ForbiddenDestination`. Its text is
    the same for every address, so that aiohappyeyeballs re-raises it rather than a summary."""

    def __init__(self, address: str | None, reason: str) -> None:
        super().__init__(errno.EACCES, "refused by the outbound-address guard")
        self.address = address
        self.reason = reason

    def forbidden(self, host: str) -> ForbiddenDestination:
        address = None if self.address is None else ipaddress.ip_address(self.address.split("%", 1)[0])
        return ForbiddenDestination(host, address, self.reason)


def _check_address(address: str, allowed: Sequence[IPNetwork]) -> None:
    reason = forbidden_reason(address, allowed)
    if reason is not None:
        raise Refused(address, reason)


def find_refusal(exc: BaseException) -> Refused | None:
    current: BaseException | None = exc
    for _ in range(10):
        if current is None:
            return None
        if isinstance(current, Refused):
            return current
        current = current.__cause__ or current.__context__
    return None


#: The body being read on each connection (the latest response's), for :func:`_connection_ended`.
Bodies: TypeAlias = "weakref.WeakKeyDictionary[ResponseHandler, aiohttp.StreamReader]"


def _connection_ended(bodies: Bodies, protocol: weakref.ref[ResponseHandler], closed: asyncio.Future[None]) -> None:
    """A connection ended: fail the body still being read on it, if any. aiohttp does not when a
    parse error after the head made it close the connection (the body would wait for ever)."""
    if not closed.cancelled():
        closed.exception()  # retrieved, so that an unclean close is not logged as never retrieved
    handler = protocol()
    if handler is not None:
        fail_unfinished(handler, bodies.pop(handler, None))


def fail_unfinished(protocol: ResponseHandler, body: aiohttp.StreamReader | None) -> None:
    """Fail ``body`` (read on ``protocol``'s connection) if it has not ended and will not: the
    connection is gone. Also called when a response's body is first registered, in case its
    connection ended before (no await lies between the two today; a patch release might add one)."""
    if body is not None and not body.is_eof() and body.exception() is None and not protocol.is_connected():
        body.set_exception(
            aiohttp.ClientPayloadError(f"the connection ended before the body did: {protocol.exception()!r}")
        )


class _GuardedResolver(AbstractResolver):
    """Resolves with the system resolver (off the event loop) and refuses the host when any of
    its addresses is forbidden: the client may connect to any of them."""

    def __init__(self, allowed: Sequence[IPNetwork]) -> None:
        self._allowed = allowed

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        loop = asyncio.get_running_loop()
        try:
            # The A-label as bytes: a str would go through Python's IDNA-2003 codec again.
            name = host.encode("ascii")
        except UnicodeError:
            raise socket.gaierror(socket.EAI_NONAME, "the host name is not an A-label") from None
        infos = await loop.getaddrinfo(name, port, type=socket.SOCK_STREAM, family=family, flags=_AI_ADDRCONFIG)
        results: list[ResolveResult] = []
        for found, _, proto, _, address in infos:
            if found not in (socket.AF_INET, socket.AF_INET6):
                continue
            _check_address(str(address[0]), self._allowed)
            resolved, resolved_port = str(address[0]), int(address[1])
            if found == socket.AF_INET6 and len(address) > 3 and address[3]:
                # A scope id (link-local): only the numeric form with its zone connects.
                resolved, service = await loop.getnameinfo(address, socket.NI_NUMERICHOST | socket.NI_NUMERICSERV)
                resolved_port = int(service)
            results.append(
                ResolveResult(
                    hostname=host, host=resolved, port=resolved_port, family=found, proto=proto, flags=_NUMERIC_FLAGS
                )
            )
        if not results:
            raise socket.gaierror(socket.EAI_NONAME, "the host name resolves to no address")
        return results

    async def close(self) -> None:
        pass


class GuardedConnector(aiohttp.TCPConnector):
    """aiohttp's connector with the guard on every socket and, in :meth:`connect`, the fix for
    aio-libs/aiohttp#13656 (see the module docstring)."""

    def __init__(self, allowed: Sequence[IPNetwork], ssl_context: ssl.SSLContext) -> None:
        self._allowed = tuple(allowed)
        self._peer_guard = ConnectedPeerGuard(self._allowed)
        #: Protocols already handed to a request: one seen again is a kept-alive connection, reused.
        self._handed_out: weakref.WeakSet[ResponseHandler] = weakref.WeakSet()
        #: The body being read on each connection (one event loop uses a connector: no lock).
        self.bodies: Bodies = weakref.WeakKeyDictionary()
        super().__init__(
            ssl=ssl_context,
            resolver=_GuardedResolver(self._allowed),
            socket_factory=self._guarded_socket,
            # No connection limits: they would queue one origin's calls behind another's. The
            # admission caps (OutboundCalls) refuse instead.
            limit=0,
            limit_per_host=0,
            keepalive_timeout=KEEPALIVE_S,
        )

    def _guarded_socket(self, addr_info: tuple[int, int, int, str, tuple[object, ...]]) -> socket.socket:
        """Every socket, before it connects: the check that covers IP-literal hosts, which aiohttp
        does not resolve."""
        family, kind, proto, _, address = addr_info
        _check_address(str(address[0]), self._allowed)
        return socket.socket(family=family, type=kind, proto=proto)

    async def connect(
        self, req: aiohttp.ClientRequest, traces: list[Trace], timeout: aiohttp.ClientTimeout
    ) -> Connection:
        while True:
            conn = await super().connect(req, traces, timeout)
            protocol = conn.protocol
            if protocol is None:  # pragma: no cover (aiohttp always returns one)
                return conn
            if protocol in self._handed_out:
                # Kept alive, reused. aiohttp#13656: a response that arrived while the connection sat
                # idle is queued on it and would be read as this request's answer. should_close
                # covers that (anything queued or buffered), a server's close and a parse error.
                if protocol.should_close:
                    conn.close()
                    continue
                return conn
            # A new connection: its peer, once more, before a byte is written (the socket
            # factory checked the address it was about to connect to).
            transport = conn.transport
            try:
                self._peer_guard(req.url.raw_host or "", transport.get_extra_info("peername") if transport else None)
            except ForbiddenDestination as exc:
                conn.close()
                raise Refused(None if exc.address is None else str(exc.address), exc.reason) from None
            closed = protocol.closed
            if closed is not None:
                closed.add_done_callback(functools.partial(_connection_ended, self.bodies, weakref.ref(protocol)))
            self._handed_out.add(protocol)
            return conn
