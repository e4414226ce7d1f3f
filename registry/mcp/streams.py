"""Server-to-client streams (the Streamable HTTP GET stream, the legacy SSE stream).

What a stream has not written yet is bounded, and a stream is only ever dropped for its *own*
client not reading:

- Change notifications are offered with a key (the list_changed of a kind, the
  resources/updated of a URI; keep-alives too). A newer event with the same key replaces the
  pending one and moves to the end: these notifications are idempotent (the client re-lists or
  re-reads), so a replica catching up on thousands of changes queues a handful of events per
  stream, not one per change, and a client that reads is never dropped for falling behind.
- Events without a key (answers and notifications on the legacy SSE stream) are kept in order,
  at most ``MAX_QUEUE`` of them; one more means the client is not reading, and it is dropped.
- A write the client has not taken (TCP buffers full) for ``stall_s`` seconds
  (``REGISTRY_LIMIT_STREAM_STALL_SECONDS``) means the same: dropped.

Pending events are always in increasing id order and newer than everything written (each event
offered is the newest so far; a replaced one moves to the end), so the ``Last-Event-ID`` a client
holds covers exactly what it was sent. A drop therefore sends *nothing* more: everything pending
is discarded at once, never one event with later ones still going out (which would let the
later id mask the lost one), and the client, resuming with the last id it got, is replayed all
it missed from the change log. ``close`` (session ended, shutdown) never discards: it ends the
stream after what is pending. Keep-alive comments keep proxies from closing idle streams.

A fan-out does not wake every stream's task. An offer to a stream whose writer waits with nothing
to write (``idle``) queues as above and notes the stream for the hub's flush, which runs once after
the offering loop turn: one pass over the noted streams writes each one's pending events through
the ASGI ``send`` (``SseStream.try_write``), each event encoded once per flush however many streams
get it. With 10,000 streams, one change is one pass of 10,000 socket writes, not 10,000 task
wake-ups; and what one turn offered (a burst of changes) is coalesced before anything is written,
as before. Order and ids are the queue's. A write the client's buffers cannot take at once is
handed, unfinished, to the stream's task, which completes it before anything else (later events
wait in the queue), and the stall rule times it like any other write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import Any

from registry.limits import DEFAULT_LIMITS, env_name
from registry.mcp.http_common import KEEPALIVE_FRAME, Receive, SendFn, SseStream, WritePass, sse_frame
from registry.mcp.protocol import dumps
from registry.mcp.sessions import ClientState
from registry.streaming import serve_until_disconnect

log = logging.getLogger("registry.mcp")

_KEEPALIVE = object()


class ClientStream:
    """One open stream: its pending events and the state of its writer."""

    def __init__(
        self, session_id: str, client: ClientState, *, persistent: bool = False, max_queue: int | None = None
    ) -> None:
        self.session_id = session_id
        self.client = client
        #: The session is in the database (Streamable HTTP), so its state can change on other replicas.
        self.persistent = persistent
        #: Unkeyed events allowed to wait (keyed ones are bounded by their keys).
        self.max_queue = max_queue if max_queue is not None else StreamHub.MAX_QUEUE
        #: key -> (event id, data) or _KEEPALIVE, oldest first. Unkeyed events get int keys.
        self.pending: OrderedDict[Hashable, Any] = OrderedDict()
        self.unkeyed = 0
        self._seq = 0
        #: Dropped: the client is not reading; nothing more is written.
        self.dropped = False
        #: Closing: write what is pending, then end the stream.
        self.closing = False
        self.wake = asyncio.Event()
        #: The id of the last event written: what the client's Last-Event-ID is (or will be).
        self.last_event_id: str | None = None
        #: A write is waiting for the client to take it; ``writes`` counts those done. The ticker
        #: notes when it first saw the current write waiting (``stalled_since``).
        self.writing = False
        self.writes = 0
        self._stall_mark = -1
        self.stalled_since = 0.0
        self.writer: asyncio.Task[None] | None = None
        #: The writer waits for ``wake`` with nothing pending and nothing being written: what is
        #: offered now is written by the hub's flush (``flush``, through ``direct``), not the writer.
        self.idle = False
        self.direct: Callable[[bytes], Coroutine[Any, Any, None] | None] | None = None
        #: Notes this stream for the hub's next flush (set by the hub); ``flush_due``: noted already.
        self.schedule_flush: Callable[[ClientStream], None] | None = None
        self.flush_due = False
        #: A direct write the transport did not take at once, and its item: the writer finishes it first.
        self.unfinished: tuple[Coroutine[Any, Any, None], Any] | None = None
        #: Called after each keep-alive written (the stream keeps its session alive).
        self.on_keepalive: Callable[[], None] | None = None

    def offer(self, item: Any, key: Hashable | None = None) -> bool:
        """Queue an event (``(event_id, data)``); with ``key``, it replaces a pending one of that key.

        False when the stream takes nothing more (closing or dropped; a client resuming from its
        last event id is replayed what was refused) or the client is not reading (it is dropped).
        """
        if self.dropped or self.closing:
            return False
        pending = self.pending
        if key is None:
            if self.unkeyed >= self.max_queue:
                self.drop(f"{self.unkeyed} events wait for it")
                return False
            self._seq += 1
            key = self._seq
            self.unkeyed += 1
        elif key in pending:
            pending.move_to_end(key)
        pending[key] = item
        if not self.idle or self.schedule_flush is None:
            self.wake.set()
        elif not self.flush_due:
            self.flush_due = True
            self.schedule_flush(self)
        return True

    def __repr__(self) -> str:
        return f"<stream of session {self.session_id[:8]}>"

    def flush(self, frames: dict[Any, bytes]) -> None:
        """Write what is pending from outside the writer, while it is ``idle`` (the hub's flush).

        ``frames`` caches encoded events over one flush: the streams told of one change share its
        bytes. A write the transport does not take at once goes to the writer, woken to finish it
        before the rest of the queue.
        """
        self.flush_due = False
        pending = self.pending
        direct = self.direct
        assert direct is not None
        while self.idle and pending:
            key, item = pending.popitem(last=False)
            if type(key) is int:
                self.unkeyed -= 1
            frame = frames.get(item)
            if frame is None:
                frame = frames[item] = sse_frame(item[1], event_id=item[0], event="message")
            rest = direct(frame)
            if rest is None:
                self.written(item)
                continue
            self.idle = False  # the rest of the queue waits for this write
            self.unfinished = (rest, item)
            self.writing = True
            self.wake.set()

    def written(self, item: Any) -> None:
        """``item`` was taken by the transport."""
        self.writes += 1
        if item is _KEEPALIVE:
            if self.on_keepalive is not None:
                self.on_keepalive()
            return
        event_id = item[0]
        if event_id is not None:
            self.last_event_id = event_id

    def offer_keepalive(self) -> bool:
        return self.offer(_KEEPALIVE, _KEEPALIVE)

    def pending_events(self) -> list[Any]:
        """What would still be written (keep-alives left out)."""
        return [item for item in self.pending.values() if item is not _KEEPALIVE]

    def close(self) -> None:
        """End the stream once what is pending is written; nothing pending is discarded."""
        self.closing = True
        self.wake.set()

    def drop(self, reason: str) -> None:
        """The client is not reading: end the stream without writing anything more.

        Everything pending goes at once (the replay resends it after the client's last event id);
        a writer blocked on the client is cancelled, since nothing will get through anyway.
        """
        if self.dropped:
            return
        self.dropped = True
        log.warning(
            "dropping stream of session %s: %s; it resumes after event %s",
            self.session_id[:8],
            reason,
            self.last_event_id,
        )
        self.pending.clear()
        self.unkeyed = 0
        self.wake.set()
        if self.writing and self.writer is not None:
            self.writer.cancel()


class StreamHub:
    MAX_QUEUE = 256
    KEEPALIVE_S = 15.0

    def __init__(self, keepalive_s: float | None = None, stall_s: float | None = None) -> None:
        #: Seconds between keep-alive comments (which also keep the stream's session alive).
        self.keepalive_s = keepalive_s if keepalive_s is not None else self.KEEPALIVE_S
        #: Seconds a write may wait for a client to take it before the stream is dropped.
        self.stall_s = stall_s if stall_s is not None else DEFAULT_LIMITS.stream_stall_seconds
        self._streams: dict[str, set[ClientStream]] = {}
        self.closing = False
        self._keepalive_task: asyncio.Task[None] | None = None
        #: Idle streams offered something this loop turn, written after it (``ClientStream.flush``).
        self._write_pass: WritePass[ClientStream] = WritePass("GET stream", {_KEEPALIVE: KEEPALIVE_FRAME})

    def start(self) -> None:
        """Start the ticker (keep-alives, stalled writers): one task for all streams, not a timer each."""
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
        loop = asyncio.get_running_loop()
        tick = min(self.keepalive_s, max(0.25, self.stall_s / 2))
        next_keepalive = loop.time() + self.keepalive_s
        while True:
            await asyncio.sleep(tick)
            now = loop.time()
            keepalive = now >= next_keepalive
            if keepalive:
                next_keepalive = now + self.keepalive_s
            self.drop_stalled(now)
            if keepalive:
                for stream in self.streams():
                    stream.offer_keepalive()

    def drop_stalled(self, now: float) -> int:
        """Drop the streams whose current write has waited more than ``stall_s`` for its client."""
        dropped = 0
        for stream in self.streams():
            if not stream.writing:
                stream._stall_mark = -1
            elif stream._stall_mark != stream.writes:
                stream._stall_mark, stream.stalled_since = stream.writes, now  # first seen waiting
            elif now - stream.stalled_since >= self.stall_s:
                stream.drop(f"it took no write for {self.stall_s:g}s (limit {env_name('stream_stall_seconds')})")
                dropped += 1
        return dropped

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

    def close_token(self, token_id: int) -> int:
        """End every stream opened with this token (it was revoked); returns how many."""
        closing = [stream for stream in self.streams() if stream.client.token_id == token_id]
        for stream in closing:
            stream.close()
        return len(closing)

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

        The writing runs in its own task, so that a drop can stop a write blocked on a client
        that does not read (there is no other way to end such a response).
        """
        stream = ClientStream(session_id, client, persistent=persistent)
        stream.on_keepalive = on_keepalive
        self._streams.setdefault(session_id, set()).add(stream)
        sse = SseStream(send)
        stream.direct = sse.try_write
        stream.schedule_flush = self._write_pass.note

        async def write_all() -> None:
            # ``writing`` is up while a send waits for the client (the ticker times it); plain
            # attribute stores, as this loop runs once per event per stream.
            stream.writing = True
            await sse.start()
            if priming_id is not None:
                await sse.event(b"", event_id=priming_id, retry_ms=3000)
                stream.last_event_id = priming_id
            for event_id, event, data in first_events or []:
                await sse.event(data, event_id=event_id, event=event)
            stream.writing = False
            if replay is not None:
                missed = await replay()  # reading the change log is not the client's time
                stream.writing = True
                for event_id, data in missed:
                    if stream.dropped:
                        break
                    await sse.event(data, event_id=event_id, event="message")
                    stream.writes += 1
                    stream.last_event_id = event_id
                stream.writing = False
            pending = stream.pending
            wake = stream.wake
            while True:
                if stream.unfinished is not None:  # a direct write the client had no room for
                    rest, item = stream.unfinished
                    await rest
                    stream.unfinished = None
                    stream.writing = False
                    stream.written(item)
                    continue
                if not pending:
                    if stream.closing or stream.dropped:
                        break
                    wake.clear()
                    stream.idle = True  # offers now go to the hub's flush
                    try:
                        await wake.wait()
                    finally:
                        stream.idle = False
                    continue
                key, item = pending.popitem(last=False)
                if type(key) is int:
                    stream.unkeyed -= 1
                stream.writing = True
                if item is _KEEPALIVE:
                    await sse.comment()
                else:
                    await sse.event(item[1], event_id=item[0], event="message")
                stream.writing = False
                stream.written(item)
            stream.writing = True  # a client that takes not even the end is dropped too
            await sse.close()
            stream.writing = False

        writer = stream.writer = asyncio.create_task(write_all())
        try:
            with contextlib.suppress(OSError):  # the client is gone: nothing more to write
                await serve_until_disconnect(writer, receive, stream.close)
        finally:
            stream.idle = False
            if stream.unfinished is not None:  # never awaited (cancelled first): end the send
                stream.unfinished[0].close()
                stream.unfinished = None
            streams = self._streams.get(session_id)
            if streams is not None:
                streams.discard(stream)
                if not streams:
                    self._streams.pop(session_id, None)
