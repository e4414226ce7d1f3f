"""Server-to-client streams (the Streamable HTTP GET stream, the legacy SSE stream).

Each open stream has a bounded queue: a client that stops reading is dropped when its queue is
full rather than allowed to grow the server's memory. Keep-alive comments keep proxies from
closing idle streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from registry.mcp.http_common import Receive, SendFn, SseStream
from registry.mcp.protocol import dumps
from registry.mcp.sessions import ClientState

log = logging.getLogger("registry.mcp")

_CLOSE = object()
_KEEPALIVE = object()


@dataclass(eq=False)
class ClientStream:
    session_id: str
    client: ClientState
    queue: asyncio.Queue[Any] = field(default_factory=lambda: asyncio.Queue(maxsize=StreamHub.MAX_QUEUE))
    dropped: bool = False
    #: The session is in the database (Streamable HTTP), so its state can change on other replicas.
    persistent: bool = False

    def offer(self, item: Any) -> bool:
        """Queue an item; a full queue means the client is stuck, so the stream is dropped."""
        if self.dropped:
            return False
        try:
            self.queue.put_nowait(item)
            return True
        except asyncio.QueueFull:
            self.close(stuck=True)
            return False

    def close(self, *, stuck: bool = False) -> None:
        """End the stream after what is queued (or at once, making room, if the queue is full)."""
        if stuck:
            self.dropped = True
            log.warning("dropping stream of session %s: client is not reading", self.session_id[:8])
        try:
            self.queue.put_nowait(_CLOSE)
        except asyncio.QueueFull:
            self.dropped = True
            with contextlib.suppress(asyncio.QueueEmpty):
                self.queue.get_nowait()
            self.queue.put_nowait(_CLOSE)


class StreamHub:
    MAX_QUEUE = 256
    KEEPALIVE_S = 15.0

    def __init__(self, keepalive_s: float | None = None) -> None:
        #: Seconds between keep-alive comments (which also keep the stream's session alive).
        self.keepalive_s = keepalive_s if keepalive_s is not None else self.KEEPALIVE_S
        self._streams: dict[str, set[ClientStream]] = {}
        self.closing = False
        self._keepalive_task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the keep-alive ticker (one task for all streams, not a timer per stream)."""
        if self._keepalive_task is None:
            self._keepalive_task = asyncio.get_running_loop().create_task(self._keepalive_forever())

    async def stop(self) -> None:
        self.close_all()
        if self._keepalive_task is not None:
            self._keepalive_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keepalive_task
            self._keepalive_task = None

    async def _keepalive_forever(self) -> None:
        while True:
            await asyncio.sleep(self.keepalive_s)
            for stream in self.streams():
                stream.offer(_KEEPALIVE)  # a stream whose queue is full is stuck, and dropped here

    @property
    def open_streams(self) -> int:
        return sum(len(s) for s in self._streams.values())

    def streams(self) -> list[ClientStream]:
        return [stream for streams in self._streams.values() for stream in streams]

    def publish(self, session_id: str, message: dict[str, Any], event_id: str | None = None) -> int:
        delivered = 0
        data = dumps(message)
        for stream in list(self._streams.get(session_id, ())):
            delivered += stream.offer((event_id, data))
        return delivered

    def close_session(self, session_id: str) -> None:
        for stream in list(self._streams.get(session_id, ())):
            stream.close()

    def close_all(self) -> None:
        self.closing = True
        for stream in self.streams():
            stream.close()

    async def serve_stream(
        self,
        session_id: str,
        client: ClientState,
        receive: Receive,
        send: SendFn,
        *,
        first_events: list[tuple[str | None, str | None, bytes]] | None = None,
        priming_id: str | None = None,
        replay: Callable[[], Awaitable[list[tuple[str, bytes]]]] | None = None,
        on_keepalive: Callable[[], None] | None = None,
        persistent: bool = False,
    ) -> None:
        """Hold an SSE response open, writing what is published for this session until either side ends.

        The stream is registered before the first ``await``, so a caller that noted the change-log
        position just before calling gets every later event live; ``replay`` supplies the ones
        before that (for ``Last-Event-ID``), written ahead of anything queued meanwhile.
        """
        stream = ClientStream(session_id, client, persistent=persistent)
        self._streams.setdefault(session_id, set()).add(stream)
        sse = SseStream(send)
        disconnected = asyncio.Event()

        async def watch_disconnect() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    disconnected.set()
                    stream.close()
                    return

        watcher = asyncio.create_task(watch_disconnect())
        try:
            await sse.start()
            if priming_id is not None:
                await sse.event(b"", event_id=priming_id, retry_ms=3000)
            for event_id, event, data in first_events or []:
                await sse.event(data, event_id=event_id, event=event)
            if replay is not None:
                for event_id, data in await replay():
                    await sse.event(data, event_id=event_id, event="message")
            queue = stream.queue
            while not disconnected.is_set():
                item = await queue.get()
                if item is _CLOSE:
                    break
                if item is _KEEPALIVE:
                    await sse.comment()
                    if on_keepalive is not None:
                        on_keepalive()
                    continue
                event_id, data = item
                await sse.event(data, event_id=event_id, event="message")
        except OSError:
            pass
        finally:
            watcher.cancel()
            streams = self._streams.get(session_id)
            if streams is not None:
                streams.discard(stream)
                if not streams:
                    self._streams.pop(session_id, None)
            if not disconnected.is_set():
                with contextlib.suppress(Exception):
                    await sse.close()
