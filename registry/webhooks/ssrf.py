"""Server-side request forgery (SSRF) guard for outbound webhook calls.

A webhook URL is chosen by whoever registers a tool, and the registry then makes requests to it
from inside the network it runs in. Without a guard a tool could point at ``http://127.0.0.1``,
an internal service, or a cloud metadata endpoint and read the answer back through the tool
result. So two checks exist:

* :func:`check_url` / :func:`check_url_sync` at save time: a clear, early error for an obviously
  bad URL. It is advisory only, since DNS can answer differently later (DNS rebinding).
* at call time, in the client (:mod:`.outbound`): the resolver refuses a host when any of its
  addresses is forbidden, every socket's address is checked before it connects (IP-literal hosts
  are not resolved), and :class:`ConnectedPeerGuard` checks a new connection's peer before a
  request byte is sent. This is the check that matters: it sees what DNS answers at that moment.

Operators who do want to reach an internal network (or loopback, in tests) list it in
``REGISTRY_WEBHOOK_ALLOWED_NETWORKS`` (see :func:`parse_networks`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from typing import Any, Final, TypeAlias

import httpx

__all__ = [
    "ALLOWED_NETWORKS_ENV",
    "ConnectedPeerGuard",
    "ForbiddenDestination",
    "IPAddress",
    "IPNetwork",
    "InvalidWebhookURL",
    "WebhookURLError",
    "check_url",
    "check_url_sync",
    "forbidden_reason",
    "is_forbidden_address",
    "parse_networks",
]

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The environment variable holding the comma-separated allow-list of CIDRs.
ALLOWED_NETWORKS_ENV: Final = "REGISTRY_WEBHOOK_ALLOWED_NETWORKS"

_SCHEME_PORTS: Final = {"http": 80, "https": 443}

# Named explicitly (not only via ``ipaddress`` flags) because they are the crown jewels of SSRF and
# the flags' coverage differs between Python versions.
_METADATA_ADDRESSES: Final = frozenset(
    {
        ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack, ...
        ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
        ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
    }
)
# RFC 6598 shared address space: ``ipaddress`` calls it neither private nor global.
_CGNAT: Final = ipaddress.IPv4Network("100.64.0.0/10")
# RFC 6052 well-known NAT64 prefix: a NAT64 gateway forwards these to the embedded IPv4 address.
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
# RFC 3879 deprecated IPv6 site-local addresses: ``ipaddress`` calls them neither private nor
# non-global, yet networks that still route them are internal ones.
_SITE_LOCAL: Final = ipaddress.IPv6Network("fec0::/10")


class WebhookURLError(Exception):
    """Base class for "this webhook URL must not be used"."""


class InvalidWebhookURL(WebhookURLError, ValueError):
    """The URL is malformed, has a scheme other than http(s), or its host does not resolve."""


class ForbiddenDestination(WebhookURLError):
    """The destination resolves to (or is connected to) an address the registry must not call.

    The message names the host and the address but never the full URL, whose path or query may
    carry credentials. It is for operators and editors (save-time checks, logs); what agents see
    is :attr:`public_message`, which leaves out the resolved address and the setting.
    """

    def __init__(self, host: str, address: IPAddress | None, reason: str) -> None:
        self.host = host
        self.address = address
        self.reason = reason
        if address is None:
            message = f"refusing to connect to {host!r}: {reason}"
        else:
            message = (
                f"refusing to connect to {host!r} at {address}: {reason} address "
                f"(add its network to {ALLOWED_NETWORKS_ENV} to allow it)"
            )
        super().__init__(message)

    @property
    def public_message(self) -> str:
        """The refusal without the address the host resolved to: an internal address is itself
        something an agent must not learn (it maps the network behind the registry)."""
        if self.address is None:
            return f"refusing to connect to {self.host!r}: {self.reason}"
        return f"refusing to connect to {self.host!r}: it resolves to a {self.reason} address"


# --------------------------------------------------------------------------- address policy


def parse_networks(value: str | None) -> tuple[IPNetwork, ...]:
    """Parse a comma-separated list of CIDRs, e.g. ``"10.0.0.0/8, 127.0.0.0/8"``.

    Host bits are tolerated (``127.0.0.1/8`` means ``127.0.0.0/8``) and a bare address means that
    single address, because this is typed by operators into an environment variable; anything that
    is not a network at all is a ``ValueError`` naming the offending item, so a typo fails startup
    instead of silently allowing nothing.
    """
    if not value:
        return ()
    networks: list[IPNetwork] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError as exc:
            raise ValueError(f"invalid network {item!r} in {ALLOWED_NETWORKS_ENV}: {exc}") from None
    return tuple(networks)


def _coerce_address(ip: IPAddress | str) -> IPAddress:
    """Accept text as well as address objects, dropping any IPv6 zone (``fe80::1%eth0``)."""
    text = str(ip).split("%", 1)[0]
    return ipaddress.ip_address(text)


def _addresses_to_check(address: IPAddress) -> list[IPAddress]:
    """The address itself plus any IPv4 address tunnelled inside it.

    An IPv4-mapped address (``::ffff:127.0.0.1``) *is* that IPv4 address to the kernel, and a
    NAT64 address (``64:ff9b::7f00:1``) is how DNS64 on IPv6-only networks spells every IPv4
    destination, so for those only the embedded address is judged. 6to4 and Teredo addresses are
    IPv6 destinations in their own right that a relay forwards, so both forms are judged.
    """
    if not isinstance(address, ipaddress.IPv6Address):
        return [address]
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    if address in _NAT64:
        return [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]
    candidates: list[IPAddress] = [address]
    if address.sixtofour is not None:
        candidates.append(address.sixtofour)
    if address.teredo is not None:
        candidates.append(address.teredo[1])
    return candidates


def _classify(address: IPAddress) -> str | None:
    """Why ``address`` is not a public destination, or None if it is."""
    if address in _METADATA_ADDRESSES:
        return "cloud metadata"
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if isinstance(address, ipaddress.IPv4Address) and address in _CGNAT:
        return "carrier-grade NAT (100.64.0.0/10)"
    if isinstance(address, ipaddress.IPv6Address) and address in _SITE_LOCAL:
        return "site-local (fec0::/10)"
    if address.is_multicast:
        return "multicast"
    if address.is_reserved:
        return "reserved"
    if address.is_private:
        return "private"
    if not address.is_global:
        return "non-global"
    return None


def forbidden_reason(ip: IPAddress | str, allowed: Iterable[IPNetwork] = ()) -> str | None:
    """Why calling ``ip`` is forbidden (e.g. ``"loopback"``), or None when it may be called.

    An address inside one of ``allowed`` is always permitted, in either its own or its unwrapped
    IPv4 form, so allowing ``127.0.0.0/8`` also allows ``::ffff:127.0.0.1``.
    """
    candidates = _addresses_to_check(_coerce_address(ip))
    allowed = tuple(allowed)
    if any(candidate in network for candidate in candidates for network in allowed):
        return None
    for candidate in candidates:
        reason = _classify(candidate)
        if reason is not None:
            return reason
    return None


def is_forbidden_address(ip: IPAddress | str, allowed: Iterable[IPNetwork] = ()) -> bool:
    """True for loopback, private, link-local, CGNAT, metadata, unspecified, multicast, reserved
    and other non-global addresses (IPv4 tunnelled in IPv6 unwrapped), unless inside ``allowed``."""
    return forbidden_reason(ip, allowed) is not None


# --------------------------------------------------------------------------- save-time check


def _destination(url: str) -> tuple[str, int]:
    """The host (IDNA-encoded, as it will be resolved) and port of an http(s) URL.

    Parsed with httpx, as the outbound client parses the URLs it calls (:mod:`.outbound`), so the
    check sees the URL exactly the way the call will.
    """
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise InvalidWebhookURL("webhook URL is not a valid URL") from None
    scheme = parsed.scheme
    if scheme not in _SCHEME_PORTS:
        raise InvalidWebhookURL(f"webhook URL scheme must be http or https, not {scheme!r}")
    host = parsed.raw_host.decode("ascii")
    if not host:
        raise InvalidWebhookURL("webhook URL has no host")
    return host, parsed.port or _SCHEME_PORTS[scheme]


def _literal_address(host: str) -> IPAddress | None:
    try:
        return _coerce_address(host)
    except ValueError:
        return None


def _ensure_allowed(host: str, addresses: Iterable[IPAddress], allowed: Iterable[IPNetwork]) -> None:
    allowed = tuple(allowed)
    for address in addresses:
        reason = forbidden_reason(address, allowed)
        if reason is not None:
            raise ForbiddenDestination(host, address, reason)


def _resolved_addresses(host: str, infos: list[tuple[Any, ...]]) -> list[IPAddress]:
    addresses = [_coerce_address(info[4][0]) for info in infos]
    if not addresses:
        raise InvalidWebhookURL(f"webhook host {host!r} resolves to no address")
    return addresses


async def check_url(url: str, allowed: Iterable[IPNetwork] = ()) -> None:
    """Save-time check: raise unless ``url`` is http(s) and *every* address its host resolves to
    may be called.

    Refusing when any address is forbidden (not only the first) matters because the client may
    connect to any of them. Raises :class:`InvalidWebhookURL` or :class:`ForbiddenDestination`.
    """
    host, port = _destination(url)
    literal = _literal_address(host)
    if literal is not None:
        _ensure_allowed(host, [literal], allowed)
        return
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise InvalidWebhookURL(f"webhook host {host!r} does not resolve: {exc}") from None
    _ensure_allowed(host, _resolved_addresses(host, infos), allowed)


def check_url_sync(url: str, allowed: Iterable[IPNetwork] = ()) -> None:
    """Blocking twin of :func:`check_url`, for save-time validation from synchronous code."""
    host, port = _destination(url)
    literal = _literal_address(host)
    if literal is not None:
        _ensure_allowed(host, [literal], allowed)
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise InvalidWebhookURL(f"webhook host {host!r} does not resolve: {exc}") from None
    _ensure_allowed(host, _resolved_addresses(host, infos), allowed)


# --------------------------------------------------------------------------- call-time guard


def _peer_address(peer: Any) -> IPAddress | None:
    """The address in a socket's ``getpeername()`` answer, or None if it cannot be told."""
    if isinstance(peer, tuple) and peer and isinstance(peer[0], str):
        try:
            return _coerce_address(peer[0])
        except ValueError:
            return None
    return None


class ConnectedPeerGuard:
    """The call-time check of a new connection's peer, run by the client's connector.

    It is given the peer address of the connected socket, so the check covers whatever the
    resolver answered at that moment: a DNS rebinding trick that passed the save-time check cannot
    get past it. (The client checks each socket's address before it connects, too: this is the
    second look, before any request byte is written.) Fails closed when the peer address cannot be
    determined.
    """

    def __init__(self, allowed: Iterable[IPNetwork] = ()) -> None:
        self._allowed = tuple(allowed)

    def __call__(self, host: str, peer: Any) -> None:
        address = _peer_address(peer)
        if address is None:
            reason: str | None = "could not determine the connected peer address"
        else:
            reason = forbidden_reason(address, self._allowed)
        if reason is not None:
            raise ForbiddenDestination(host, address, reason)
