"""The headers an outbound request may carry from a catalog entry (a tool's webhook, an http resource).

Editors configure them; the registry still decides the ones that frame the message or pick the
connection, and checks the rest itself so that the HTTP client never gets to quote a bad value (often a
credential) in an exception message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from .signing import SIGNATURE_HEADER

__all__ = ["RESERVED_HEADERS", "InvalidHeader", "configured_headers"]

_TOKEN_RE: Final = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")

#: Set by the HTTP client or by the registry itself; letting an entry's configuration override them would
#: let it break message framing (request smuggling), route around the connection the SSRF guard
#: checked, ask for an encoding the bounded reader cannot inflate, or forge the signature.
RESERVED_HEADERS: Final = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "proxy-authorization",
        "proxy-connection",
        "content-type",
        "accept",
        "accept-encoding",
        "user-agent",
        SIGNATURE_HEADER.lower(),
    }
)


class InvalidHeader(ValueError):
    """A configured header that cannot be sent; the message names the header, never its value."""


def configured_headers(headers: Mapping[str, str], what: str) -> list[tuple[str, str]]:
    """``headers`` checked (token names, one-line ASCII values) and without the reserved ones.

    ``what`` says whose headers they are in the error message (``"webhook"``, ``"resource"``).
    """
    result: list[tuple[str, str]] = []
    for name, value in headers.items():
        if not isinstance(name, str) or not _TOKEN_RE.fullmatch(name):
            raise InvalidHeader(f"invalid {what} header name {name!r}")
        if not isinstance(value, str) or not value.isascii() or any(c in value for c in "\r\n\0"):
            raise InvalidHeader(f"invalid value for {what} header {name!r} (must be ASCII text on one line)")
        if name.lower() not in RESERVED_HEADERS:
            result.append((name, value))
    return result
