"""``If-Match`` as RFC 9110 (section 13.1.1) defines it, against the registry's version ETags.

An entry's ETag names its newest version (``"v3"``), not the bytes of one representation, so
any change to the entry gives it a new tag. The header is parsed by the grammar::

    If-Match    = "*" / #entity-tag
    entity-tag  = [ "W/" ] DQUOTE *etagc DQUOTE
    etagc       = %x21 / %x23-7E / obs-text

with the list rule's optional whitespace and empty elements. A value that does not parse
(``v3`` without quotes, an unterminated quote, ``*`` inside a list) is a client error answered
400 with the expected form, never a 412 that would send the client off to reload and retry
what can never match.

Weak tags (``W/"v3"``) are parsed and compared by the version they name. RFC 9110 asks for the
strong comparison on If-Match, under which a weak tag never matches; the registry's tags already
change with every version (what the strong comparison protects), and proxies that weaken ETags
on the way (nginx does when it compresses) would otherwise turn every conditional save into a
412 the client cannot fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from registry.catalog.errors import CatalogError

#: How much of a malformed header is echoed back in the problem detail.
_ECHO_CHARS = 80
_VERSION_TAG = re.compile(r"v([1-9][0-9]{0,9})")
_OWS = " \t"


class MalformedPrecondition(CatalogError):
    """An ``If-Match`` value that is not a valid header (400, not 412)."""

    status = 400
    title = "Malformed If-Match"


def make_etag(version: int) -> str:
    return f'"v{version}"'


@dataclass(frozen=True)
class IfMatch:
    """A parsed ``If-Match``: ``*`` or the entity tags it lists."""

    any: bool
    #: The opaque tags listed (without quotes or ``W/``), in order.
    tags: tuple[str, ...] = ()

    @property
    def versions(self) -> frozenset[int]:
        """The entry versions the listed tags name (tags of another form name none)."""
        found = set()
        for tag in self.tags:
            match = _VERSION_TAG.fullmatch(tag)
            if match is not None:
                found.add(int(match.group(1)))
        return frozenset(found)

    def matches(self, current_version: int) -> bool:
        """Whether a save on top of ``current_version`` may proceed (the entry exists: ``*`` matches)."""
        return self.any or current_version in self.versions


def _malformed(value: str, reason: str) -> MalformedPrecondition:
    shown = value if len(value) <= _ECHO_CHARS else value[:_ECHO_CHARS] + "..."
    return MalformedPrecondition(
        f"If-Match {shown!r} is malformed: {reason}. Send the ETag exactly as the server gave it, quotes "
        'included (If-Match: "v3"), a comma-separated list of such tags, or * (RFC 9110, section 13.1.1)'
    )


def parse_if_match(value: str) -> IfMatch:
    """Parse an ``If-Match`` field value; raises :class:`MalformedPrecondition` (400) if it is not one."""
    stripped = value.strip(_OWS)
    if stripped == "*":
        return IfMatch(any=True)
    tags: list[str] = []
    position, end = 0, len(value)
    while True:
        # Optional whitespace and empty list elements ("a, , b") before the next element.
        while position < end and (value[position] in _OWS or value[position] == ","):
            position += 1
        if position >= end:
            break
        if value.startswith("W/", position):
            position += 2
        if position >= end or value[position] != '"':
            if value[position:].lstrip(_OWS).startswith("*"):
                raise _malformed(value, "* stands alone; it cannot be part of a list")
            raise _malformed(value, "an entity tag is a quoted string, optionally prefixed by W/")
        closing = value.find('"', position + 1)
        if closing < 0:
            raise _malformed(value, "an entity tag's closing quote is missing")
        opaque = value[position + 1 : closing]
        bad = next((c for c in opaque if not (c == "\x21" or "\x23" <= c <= "\x7e" or "\x80" <= c <= "\xff")), None)
        if bad is not None:
            raise _malformed(value, f"an entity tag may not contain {bad!r}")
        tags.append(opaque)
        position = closing + 1
        while position < end and value[position] in _OWS:
            position += 1
        if position < end and value[position] != ",":
            raise _malformed(value, "entity tags in a list are separated by commas")
    if not tags:
        raise _malformed(value, "it names no entity tag")
    return IfMatch(any=False, tags=tuple(tags))
