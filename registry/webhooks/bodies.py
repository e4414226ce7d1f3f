"""Reading an upstream HTTP body with a size bound that holds *while* it arrives.

Webhook answers and ``http`` resources both come from servers the registry does not control. A
cap checked after ``response.read()`` is no cap: a 400 MB body is in memory before it is refused.
And counting what a generic HTTP client decodes is not enough either: httpx's gzip decoder inflates each
network chunk in one go: one 64 KiB chunk of a gzip bomb becomes some 64 MB before anyone counts
it. So bodies are read raw here and inflated with an output bound per step (``zlib``'s
``max_length``), every decoded byte counted as it is produced, and the read stops the moment the
cap is passed. Only ``gzip`` and ``deflate`` are offered (:data:`ACCEPT_ENCODING`), and any other
``Content-Encoding`` is refused rather than decoded without a bound.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Final, Protocol

__all__ = [
    "ACCEPT_ENCODING",
    "BodyError",
    "BodyTooLarge",
    "CorruptEncoding",
    "RawBody",
    "UnsupportedEncoding",
    "iter_body",
    "read_body",
]

#: What outbound requests send as ``Accept-Encoding``: only what :func:`iter_body` can inflate
#: with a bound.
ACCEPT_ENCODING: Final = "gzip, deflate"

#: The most bytes one inflate step may produce (and so the most held at once per read).
_STEP: Final = 64 * 1024
_GZIP: Final = frozenset({"gzip", "x-gzip"})
_DEFLATE: Final = "deflate"


class _Headers(Protocol):
    def get(self, name: str, default: str, /) -> str | None: ...


class RawBody(Protocol):
    """What a body is read from: :class:`~.outbound.OutboundResponse` (or anything with its
    headers and its still-encoded body as it arrives)."""

    @property
    def headers(self) -> _Headers: ...

    def aiter_raw(self) -> AsyncIterator[bytes]: ...


class BodyError(Exception):
    """The body cannot be read within the rules; the message is safe to show an agent."""


class BodyTooLarge(BodyError):
    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"the body is larger than {max_bytes} bytes")
        self.max_bytes = max_bytes


class UnsupportedEncoding(BodyError):
    def __init__(self, encoding: str) -> None:
        shown = "".join(c for c in encoding if c.isalnum() or c in "-_, ")[:40]
        super().__init__(f"unsupported Content-Encoding {shown!r} (only gzip and deflate are accepted)")
        self.encoding = encoding


class CorruptEncoding(BodyError):
    def __init__(self, encoding: str) -> None:
        super().__init__(f"the body is not valid {encoding} data")
        self.encoding = encoding


class _Identity:
    def feed(self, data: bytes) -> Iterator[bytes]:
        if data:
            yield data

    def finish(self) -> Iterator[bytes]:
        return iter(())


class _Inflater:
    """zlib inflation in steps of at most :data:`_STEP` output bytes.

    ``deflate`` is meant to be zlib-wrapped, but some servers send a raw deflate stream; like
    browsers (and httpx), a failure on the first bytes retries them as raw deflate.
    """

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._raw_fallback = encoding == _DEFLATE
        self._started = False
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding in _GZIP else zlib.MAX_WBITS)

    def _inflate(self, data: bytes) -> bytes:
        try:
            out = self._z.decompress(data, _STEP)
        except zlib.error:
            if self._started or not self._raw_fallback:
                raise CorruptEncoding(self.encoding) from None
            self._raw_fallback = False
            self._z = zlib.decompressobj(-zlib.MAX_WBITS)
            return self._inflate(data)
        self._started = True
        return out

    def feed(self, data: bytes) -> Iterator[bytes]:
        while data and not self._z.eof:
            out = self._inflate(data)
            tail = self._z.unconsumed_tail
            if out:
                yield out
            elif len(tail) >= len(data):
                break  # no progress: cannot happen with a positive max_length, but never spin
            data = tail
        # Anything after the end of the (first) stream is ignored, as httpx does.

    def finish(self) -> Iterator[bytes]:
        try:
            rest = self._z.flush(_STEP)
        except zlib.error:
            raise CorruptEncoding(self.encoding) from None
        if rest:
            yield rest


def _decoder(content_encoding: str) -> _Identity | _Inflater:
    codings = [c.strip().lower() for c in content_encoding.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return _Identity()
    if len(codings) == 1 and (codings[0] in _GZIP or codings[0] == _DEFLATE):
        return _Inflater(codings[0])
    raise UnsupportedEncoding(content_encoding)


async def iter_body(response: RawBody, max_bytes: int) -> AsyncIterator[bytes]:
    """The decoded body of a streamed ``response`` in pieces of at most 64 KiB, raising
    :class:`BodyTooLarge` as soon as more than ``max_bytes`` bytes (decoded, or on the wire)
    have arrived, :class:`UnsupportedEncoding` or :class:`CorruptEncoding` for bodies that cannot
    be inflated with a bound."""
    decoder = _decoder(response.headers.get("content-encoding", "") or "")
    wire = 0
    decoded = 0
    async for raw in response.aiter_raw():
        wire += len(raw)
        if wire > max_bytes:
            raise BodyTooLarge(max_bytes)
        for piece in decoder.feed(raw):
            decoded += len(piece)
            if decoded > max_bytes:
                raise BodyTooLarge(max_bytes)
            yield piece
    for piece in decoder.finish():
        decoded += len(piece)
        if decoded > max_bytes:
            raise BodyTooLarge(max_bytes)
        yield piece


async def read_body(response: RawBody, max_bytes: int) -> bytes:
    """All of :func:`iter_body`, as one ``bytes``."""
    data = bytearray()
    async for piece in iter_body(response, max_bytes):
        data += piece
    return bytes(data)
