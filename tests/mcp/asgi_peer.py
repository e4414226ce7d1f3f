"""An ASGI peer for the stream writers (``StreamHub.serve_stream``, ``ListenService.serve_sse``)
in unit tests: it records what is sent, and can hold sends the way a server waits for a client
whose TCP window is full."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any


class AsgiPeer:
    """``block`` makes sends wait (a client that stopped reading) until ``release``;
    ``disconnect`` ends the request as a client closing it would."""

    def __init__(self) -> None:
        self.sent: list[MutableMapping[str, Any]] = []
        self.block = False
        self._released = asyncio.Event()
        self._gone = asyncio.Event()

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if self.block:
            await self._released.wait()
        self.sent.append(message)

    def release(self) -> None:
        self.block = False
        self._released.set()

    async def receive(self) -> dict[str, Any]:
        await self._gone.wait()
        return {"type": "http.disconnect"}

    def disconnect(self) -> None:
        self._gone.set()

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")

    @property
    def ended(self) -> bool:
        return any(m["type"] == "http.response.body" and not m.get("more_body") for m in self.sent)

    def events(self) -> list[tuple[str | None, bytes]]:
        """(id, data) of each event sent, in order; comments (keep-alives) left out."""
        out = []
        for frame in self.body.split(b"\n\n"):
            fields = dict(line.split(b": ", 1) for line in frame.split(b"\n") if b": " in line and line[:1] != b":")
            if b"data" in fields:
                event_id = fields.get(b"id")
                out.append((event_id.decode() if event_id is not None else None, fields[b"data"]))
        return out
