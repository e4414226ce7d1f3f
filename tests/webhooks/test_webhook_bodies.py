"""The bounded body reader: decoded bytes counted as they are inflated, never more than a step held."""

from __future__ import annotations

import tracemalloc
import zlib
from collections.abc import AsyncIterator

import httpx
import pytest

from registry.webhooks import BodyTooLarge, iter_body, read_body
from registry.webhooks.bodies import CorruptEncoding, UnsupportedEncoding

MiB = 1024 * 1024


class _Chunks(httpx.AsyncByteStream):
    """A response body arriving in network-sized chunks."""

    def __init__(self, data: bytes, size: int = 64 * 1024) -> None:
        self._data = data
        self._size = size

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self._data), self._size):
            yield self._data[start : start + self._size]


def _response(data: bytes, encoding: str | None = None) -> httpx.Response:
    headers = {"Content-Encoding": encoding} if encoding else {}
    return httpx.Response(200, headers=headers, stream=_Chunks(data))


def _compress(data: bytes, wbits: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return compressor.compress(data) + compressor.flush()


PAYLOAD = b"hello, bounded world\n" * 5000


@pytest.mark.parametrize(
    ("encoding", "wbits"),
    [("gzip", 16 + zlib.MAX_WBITS), ("x-gzip", 16 + zlib.MAX_WBITS), ("deflate", zlib.MAX_WBITS), ("deflate", -15)],
)
async def test_encodings_round_trip(encoding: str, wbits: int) -> None:
    assert await read_body(_response(_compress(PAYLOAD, wbits), encoding), MiB) == PAYLOAD


async def test_identity_and_absent_encoding() -> None:
    assert await read_body(_response(PAYLOAD), MiB) == PAYLOAD
    assert await read_body(_response(PAYLOAD, "identity"), MiB) == PAYLOAD


async def test_gzip_bomb_is_cut_off_without_inflating_a_chunk_at_once() -> None:
    bomb = _compress(bytes(200 * MiB), 16 + zlib.MAX_WBITS)  # ~200 kB on the wire
    assert len(bomb) < MiB
    pieces: list[int] = []
    tracemalloc.start()
    try:
        with pytest.raises(BodyTooLarge) as info:
            async for piece in iter_body(_response(bomb, "gzip"), 4 * MiB):
                pieces.append(len(piece))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.max_bytes == 4 * MiB
    assert max(pieces) <= 64 * 1024
    assert sum(pieces) <= 4 * MiB
    # httpx's own decoder would inflate each 64 KiB chunk of this into ~64 MB in one call.
    assert peak < 4 * MiB, f"peak allocation {peak / MiB:.1f} MiB while reading a gzip bomb"


async def test_the_cap_counts_wire_bytes_too() -> None:
    with pytest.raises(BodyTooLarge):
        await read_body(_response(b"a" * (MiB + 1)), MiB)
    assert len(await read_body(_response(b"a" * MiB), MiB)) == MiB


@pytest.mark.parametrize("encoding", ["br", "zstd", "gzip, gzip", "compress"])
async def test_encodings_that_cannot_be_bounded_are_refused(encoding: str) -> None:
    with pytest.raises(UnsupportedEncoding, match="only gzip and deflate"):
        await read_body(_response(b"whatever", encoding), MiB)


async def test_corrupt_data_is_an_error() -> None:
    with pytest.raises(CorruptEncoding, match="not valid gzip"):
        await read_body(_response(b"definitely not gzip", "gzip"), MiB)
