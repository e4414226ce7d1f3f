"""Words for outbound failures that are safe to show an agent.

A tool result or a ``resources/read`` error goes to a model and its user, who are not the operator:
they may learn that a call failed and roughly why, and the configured host name, but not the URL
(its path and query may carry credentials), not the addresses a host resolved to, and not other
internal names, since those map the network behind the registry. Exception texts from the socket
layer are the usual leak ("Connect call failed ('10.0.0.5', 443)"), so they are reduced to a
fixed phrase here instead of being quoted.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import ssl

import httpx

from .outbound import ConnectFailed, ConnectionLost, OutboundError, OutboundTimeout, ProtocolViolation

__all__ = ["host_for_messages", "transport_failure"]

#: errno values whose ``strerror`` text names no address and is worth passing on.
_SAFE_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ETIMEDOUT,
        errno.EPIPE,
    }
)


def host_for_messages(url: str, *, hide_addresses: bool = False) -> str:
    """The host of ``url``, quoted (``'api.example.com'``), or a placeholder when there is none.

    With ``hide_addresses`` a host that is a literal IP address is not named either (``the
    upstream server``): an address is exactly what must not reach an agent.
    """
    try:
        host = httpx.URL(url).host
    except (httpx.InvalidURL, TypeError, ValueError):
        return "(invalid URL)"
    if not host:
        return "(no host)"
    if hide_addresses:
        try:
            ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            pass
        else:
            return "the upstream server"
    return repr(host)


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < 10:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


#: Causes (anywhere in the chain) with a fixed description, most specific first.
_CAUSES: tuple[tuple[type[BaseException], str], ...] = (
    (socket.gaierror, "the host name does not resolve"),
    (ssl.SSLCertVerificationError, "its TLS certificate could not be verified"),
    (ssl.SSLError, "the TLS handshake failed"),
)
#: The client's own exception classes (registry/webhooks/outbound.py), most specific first.
_OUTBOUND_ERRORS: tuple[tuple[type[BaseException], str], ...] = (
    (OutboundTimeout, "it timed out"),
    (ConnectFailed, "the connection failed"),
    (ProtocolViolation, "the server broke the HTTP protocol"),
    (ConnectionLost, "the connection was lost"),
    (OutboundError, "the exchange failed"),
)


def transport_failure(exc: BaseException) -> str:
    """A short, address-free description of why a connection or exchange failed."""
    for cause in _causes(exc):
        for kind, text in _CAUSES:
            if isinstance(cause, kind):
                return text
        if isinstance(cause, OSError) and cause.errno in _SAFE_ERRNOS:
            return os.strerror(cause.errno).lower()
    return next((text for kind, text in _OUTBOUND_ERRORS if isinstance(exc, kind)), type(exc).__name__)
