"""``subscriptions/listen`` (2026-07-28): change notifications on a stream the client asked for.

In the stateless era there is no session and no GET stream: a client that wants to hear of
changes sends ``subscriptions/listen`` with a filter (which list changes, which resource URIs),
and the response *is* the stream. ``ListenService.open`` validates the filter and registers the
listener; the returned ``ListenStream`` yields the JSON-RPC messages the transport writes:

1. ``notifications/subscriptions/acknowledged`` with the honoured filter, always first;
2. ``notifications/{tools,prompts,resources}/list_changed`` and ``notifications/resources/updated``
   as the change log says the listener's label changed, the same decision the session era makes
   (``ChangeEvent.changes_list_of``, ``updated_uris``); never progress or log messages;
3. on graceful server shutdown, the final result ``{"resultType": "complete", ...}``.

Every frame carries ``_meta["io.modelcontextprotocol/subscriptionId"]``: the listen request's
JSON-RPC id, of the same type (clients demultiplex by exact value).

The change feed (which follows PostgreSQL NOTIFY, so every replica hears every write) hands each
batch to the ``Notifier``, which offers it to the session streams and, in the same loop turn, to
this service (``offer_event``): listeners are grouped by label, so a change is looked at once per
label it touches, and an offer is one keyed dict store per listener. Frames are built when the
transport takes them, not per offer (and a listener's list change is encoded once, then reused:
its bytes differ from another listener's only by the subscription id). A team's change (its
``audience``) reaches only the listeners whose caller sees that team, as on session streams.

As on session streams (streams.py), a change does not wake every listener's task: an offer to a
listener whose writer waits with nothing to write (``idle``) is queued and the listener noted for
the service's flush, one pass after the offering loop turn that writes each noted listener's
frames through the ASGI ``send`` (``SseStream.try_write``); a write the client has no room for is
finished by the listener's own task, before anything else.

Bounds, as for session streams (streams.py): what waits for a listener is keyed (the
list_changed of a kind, the resources/updated of a URI), so a newer one replaces a pending one
and a listener holds at most three list changes plus its URIs; a listener whose transport has not
come back for the next message for ``REGISTRY_LIMIT_STREAM_STALL_SECONDS`` (its client takes no
writes) is dropped: no final result, its consumer task is cancelled, and the client re-listens and
re-fetches (there is no replay in this era). ``serve_sse`` is the HTTP writer (keep-alive
comments, no event ids); stdio iterates the stream itself. Open listens are bounded per process
(``REGISTRY_LIMIT_LISTEN_STREAMS``) and per caller (``REGISTRY_LIMIT_LISTEN_STREAMS_PER_CALLER``):
a token, a single-sign-on user, or an anonymous client's address, the one notion of caller the
outbound caps use (``registry.webhooks.caller_key``), so no one caller takes every place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Hashable, Mapping
from typing import Any

from registry.limits import DEFAULT_LIMITS, LimitExceeded, Limits, env_name
from registry.mcp.http_common import KEEPALIVE_FRAME, Receive, SendFn, SseStream, WritePass, sse_frame
from registry.mcp.notifier import LIST_CHANGED, RESOURCE_UPDATED, ChangeEvent, updated_uris
from registry.mcp.protocol import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    META_SERVER_INFO,
    META_SUBSCRIPTION_ID,
    JsonRpcError,
    RequestId,
    dumps,
)
from registry.mcp.server import SERVER_INFO
from registry.mcp.sessions import ClientState
from registry.streaming import serve_until_disconnect
from registry.webhooks import caller_key

log = logging.getLogger("registry.mcp")

ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
#: SubscriptionFilter flag -> the entry kind whose list changes it asks for.
FILTER_FLAGS = {"toolsListChanged": "tool", "promptsListChanged": "prompt", "resourcesListChanged": "resource"}
#: serverInfo on the final result (the stateless era carries it in ``_meta``).
LISTEN_SERVER_INFO = {**SERVER_INFO, "title": "MCP Registry"}

_ACK_KEY = ("ack",)
#: Pending items that are not notifications: a keep-alive comment is due; the final result.
_KEEPALIVE: tuple[str, str | None] = ("", None)
_FINAL: tuple[str, str | None] = ("", "")


def parse_filter(params: Mapping[str, Any], limits: Limits) -> tuple[dict[str, Any], frozenset[str], list[str]]:
    """``params.notifications`` -> (the honoured filter for the ack, the kinds, the URIs).

    -32602 for a missing or malformed filter, naming the limit when one is passed. Unknown keys
    are ignored (a later revision may add kinds); false flags and an empty URI list are left out
    of the ack rather than echoed as falsy values.
    """
    wanted = params.get("notifications")
    if not isinstance(wanted, dict):
        raise JsonRpcError(INVALID_PARAMS, '"notifications" is required and must be an object (a SubscriptionFilter)')
    honoured: dict[str, Any] = {}
    kinds: set[str] = set()
    for flag, kind in FILTER_FLAGS.items():
        value = wanted.get(flag)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise JsonRpcError(INVALID_PARAMS, f'"notifications.{flag}" must be a boolean')
        if value:
            honoured[flag] = True
            kinds.add(kind)
    uris: list[str] = []
    requested = wanted.get("resourceSubscriptions")
    if requested is not None:
        if not isinstance(requested, list):
            raise JsonRpcError(INVALID_PARAMS, '"notifications.resourceSubscriptions" must be an array of URIs')
        if len(requested) > limits.subscriptions:
            raise _limit_error(
                "subscriptions", f"{len(requested)} resource subscriptions asked for; at most {limits.subscriptions}"
            )
        seen: set[str] = set()
        for uri in requested:
            if not isinstance(uri, str) or not uri:
                raise JsonRpcError(INVALID_PARAMS, '"notifications.resourceSubscriptions" must hold non-empty strings')
            if len(uri) > limits.uri_chars:
                raise _limit_error(
                    "uri_chars", f"a subscribed URI has {len(uri)} characters; at most {limits.uri_chars}"
                )
            if uri not in seen:
                seen.add(uri)
                uris.append(uri)
        if uris:
            honoured["resourceSubscriptions"] = list(uris)
    return honoured, frozenset(kinds), uris


def _caller_kind(caller: str) -> str:
    """Which kind of caller a key names, for a refusal (the key itself is not echoed)."""
    kinds = {"token": "token", "user": "single-sign-on user", "address": "client address"}
    return kinds.get(caller.partition(":")[0], "anonymous")


def _limit_error(limit: str, message: str, code: int = INVALID_PARAMS) -> JsonRpcError:
    return JsonRpcError(code, str(LimitExceeded(limit, message)))


class ListenStream:
    """One open listen: its pending frames and whether its consumer keeps up.

    An async iterator of JSON-RPC message dicts. Consume it from one task (a transport's writer):
    that task is cancelled when the listener is dropped for not reading, since a write blocked on
    such a client ends no other way.
    """

    def __init__(
        self,
        service: ListenService,
        request_id: RequestId,
        client: ClientState,
        honoured: dict[str, Any],
        kinds: frozenset[str],
        uris: list[str],
        caller: str = "anonymous",
    ) -> None:
        self.service = service
        self.request_id = request_id
        self.label = client.label
        self.token_id = client.token_id
        #: Whose place this listen takes (``REGISTRY_LIMIT_LISTEN_STREAMS_PER_CALLER``).
        self.caller = caller
        self.principal = client.principal
        self.kinds = kinds
        #: The teams whose changes this listener hears of besides global ones (None: all), from the
        #: caller's principal when it opened the listen.
        self.visible_teams = client.visible_teams
        #: What ``updated_uris`` matches changes against (the session era's matching).
        self.match = ClientState(
            label=client.label,
            principal=client.principal,
            token_id=client.token_id,
            user=client.user,
            visible_teams=client.visible_teams,
            subscriptions=set(uris),
        )
        self.filter = honoured
        self._meta: dict[str, Any] = {META_SUBSCRIPTION_ID: request_id}
        #: key -> (method, uri or None), oldest first; the ack is first of all.
        self.pending: OrderedDict[Hashable, tuple[str, str | None]] = OrderedDict()
        self.pending[_ACK_KEY] = (ACKNOWLEDGED, None)
        self.wake = asyncio.Event()
        #: Closing (shutdown): write what is pending, then the final result, then end.
        self.closing = False
        self._final_sent = False
        #: Dropped (not reading) or closed by the client: nothing more is written.
        self.ended = False
        #: Since when the consumer has been away (writing what it took; ``serve_sse``: since its
        #: current write started); None while it waits for a frame. Counted from opening, so a
        #: listen nobody consumes is dropped too.
        self.outside_since: float | None = time.monotonic()
        self._consumer: asyncio.Task[Any] | None = None
        #: The service offers a keep-alive every ``keepalive_s`` (an SSE writer sets this).
        self.keepalives = False
        self._encoded: dict[str, bytes] = {}
        #: The SSE writer waits with nothing to write: offers go to the service's flush, which
        #: writes through ``direct`` (set by ``serve_sse``); ``flush_due``: noted for it already.
        self.idle = False
        self.direct: Callable[[bytes], Coroutine[Any, Any, None] | None] | None = None
        self.flush_due = False
        #: A direct write the transport did not take at once: the writer finishes it first.
        self.unfinished: Coroutine[Any, Any, None] | None = None
        self._frames: dict[str, bytes] = {}

    def __repr__(self) -> str:
        return f"<listen stream {self.request_id!r} label {self.label}>"

    # -- fed by the service ------------------------------------------------------------
    def offer(self, key: Hashable, method: str, uri: str | None = None) -> bool:
        """Queue a notification; one pending under the same key is replaced (and moves to the end)."""
        return self._put(key, (method, uri))

    def offer_keepalive(self) -> bool:
        return self._put(_KEEPALIVE, _KEEPALIVE)

    def _put(self, key: Hashable, item: tuple[str, str | None]) -> bool:
        if self.ended or self.closing:
            return False
        pending = self.pending
        if key in pending:
            pending.move_to_end(key)
        pending[key] = item
        if not self.idle:
            self.wake.set()
        elif not self.flush_due:
            self.flush_due = True
            self.service.write_pass.note(self)
        return True

    def flush(self, frames: dict[Any, bytes] | None = None) -> None:
        """Write what is pending from outside the SSE writer, while it is ``idle`` (the service's
        flush); a write the transport does not take at once goes to the writer, woken to finish it.
        ``frames`` (the pass's shared encodings) is not used: a listener's bytes carry its own
        subscription id, so they are cached per listener."""
        self.flush_due = False
        pending = self.pending
        direct = self.direct
        assert direct is not None
        while self.idle and pending:
            item = pending.popitem(last=False)[1]
            if item is _KEEPALIVE:
                frame = KEEPALIVE_FRAME
            elif item[1] is None:  # a list change: this listener's bytes for it, encoded once
                frame = self._frames.get(item[0]) or self._frames.setdefault(
                    item[0], sse_frame(self.encode(item), event="message")
                )
            else:
                frame = sse_frame(self.encode(item), event="message")
            rest = direct(frame)
            if rest is not None:
                self.idle = False  # the rest waits for this write, timed by the stall rule
                self.unfinished = rest
                self.outside_since = time.monotonic()
                self.wake.set()

    def close(self) -> None:
        """Graceful end (shutdown, token revoked): what is pending, then the final result."""
        self.closing = True
        self.wake.set()

    def drop(self, reason: str) -> None:
        """The client is not reading: end without writing anything more (no final result: the client
        sees the stream lost, re-listens and re-fetches)."""
        if self.ended:
            return
        log.warning("dropping listen stream %r (label %s): %s", self.request_id, self.label, reason)
        self._end()
        consumer = self._consumer
        if consumer is not None and self.outside_since is not None and not consumer.done():
            consumer.cancel()  # blocked writing to a client that does not read

    def _end(self) -> None:
        self.ended = True
        self.pending.clear()
        self.wake.set()
        self.service._forget(self)

    # -- taken by the transport --------------------------------------------------------
    def frame(self, method: str, uri: str | None) -> dict[str, Any]:
        params: dict[str, Any] = {"_meta": self._meta}
        if method == ACKNOWLEDGED:
            params["notifications"] = self.filter
        elif uri is not None:
            params["uri"] = uri
        return {"jsonrpc": "2.0", "method": method, "params": params}

    def final_result(self) -> dict[str, Any]:
        meta = {META_SUBSCRIPTION_ID: self.request_id, META_SERVER_INFO: LISTEN_SERVER_INFO}
        return {"jsonrpc": "2.0", "id": self.request_id, "result": {"resultType": "complete", "_meta": meta}}

    async def _take(self, timeout: float | None) -> tuple[str, str | None] | None:
        """The next pending (method, uri), ``_FINAL`` once when closing, None when ``timeout``
        passed without one; raises ``StopAsyncIteration`` at the end."""
        self._consumer = asyncio.current_task()
        self.outside_since = None
        try:
            while True:
                if self.pending:
                    return self.pending.popitem(last=False)[1]
                if self.ended:
                    raise StopAsyncIteration
                if self.closing:
                    if self._final_sent:
                        self._end()
                        raise StopAsyncIteration
                    self._final_sent = True
                    return _FINAL
                self.wake.clear()
                if timeout is None:
                    await self.wake.wait()
                    continue
                try:
                    async with asyncio.timeout(timeout):
                        await self.wake.wait()
                except TimeoutError:
                    return None
        finally:
            self.outside_since = time.monotonic()

    async def next(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next message; None when ``timeout`` passed without one (or a keep-alive is due:
        write one); raises ``StopAsyncIteration`` at the end."""
        item = await self._take(timeout)
        if item is None or item is _KEEPALIVE:
            return None
        if item is _FINAL:
            return self.final_result()
        return self.frame(*item)

    def encode(self, item: tuple[str, str | None]) -> bytes:
        """A pending item as JSON bytes; a listener's list changes are encoded once per kind, then reused."""
        if item is _FINAL:
            return dumps(self.final_result())
        method, uri = item
        if uri is not None:
            return dumps(self.frame(method, uri))
        encoded = self._encoded.get(method)
        if encoded is None:
            encoded = self._encoded[method] = dumps(self.frame(method, None))
        return encoded

    def __aiter__(self) -> ListenStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        message = await self.next()
        assert message is not None
        return message

    async def aclose(self) -> None:
        """The client went away or cancelled the listen: forget it, write nothing more."""
        if not self.ended:
            self._end()


class ListenService:
    """Every open listen of this process, grouped by label for the fan-out."""

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        keepalive_s: float = 15.0,
        stall_s: float | None = None,
    ) -> None:
        self.limits = limits or DEFAULT_LIMITS
        self.keepalive_s = keepalive_s
        self.stall_s = stall_s if stall_s is not None else self.limits.stream_stall_seconds
        self._by_label: dict[str, set[ListenStream]] = {}
        #: Open listens per caller key (token, SSO user or client address).
        self._per_caller: dict[str, int] = {}
        self._count = 0
        self.closing = False
        self._ticker: asyncio.Task[None] | None = None
        #: Idle listeners offered something this loop turn, written after it (``ListenStream.flush``).
        self.write_pass: WritePass[ListenStream] = WritePass("listen stream")

    def __len__(self) -> int:
        return self._count

    def streams(self) -> list[ListenStream]:
        return [stream for streams in self._by_label.values() for stream in streams]

    # -- opening -----------------------------------------------------------------------
    async def open(
        self, request_id: RequestId, params: dict[str, Any], client: ClientState, peer: str | None = None
    ) -> ListenStream:
        """Validate the filter and register the listener; it hears every change dispatched from now on.

        Raises ``JsonRpcError`` (before anything is sent) for a bad filter or when the process or
        the caller (its token, else its SSO user, else ``peer``, the client's address) already
        holds as many listens as allowed.
        """
        honoured, kinds, uris = parse_filter(params, self.limits)
        if self._count >= self.limits.listen_streams:
            raise _limit_error(
                "listen_streams", f"this server already holds {self._count} listen streams", INVALID_REQUEST
            )
        caller = caller_key(client.token_id, client.user, None, peer)
        held = self._per_caller.get(caller, 0)
        if held >= self.limits.listen_streams_per_caller:
            raise _limit_error(
                "listen_streams_per_caller",
                f"this caller ({_caller_kind(caller)}) already holds {held} listen streams; close one first",
                INVALID_REQUEST,
            )
        stream = ListenStream(self, request_id, client, honoured, kinds, uris, caller)
        self._by_label.setdefault(stream.label, set()).add(stream)
        self._count += 1
        self._per_caller[caller] = held + 1
        if self.closing:
            stream.close()  # shutting down: the ack, then the final result
        return stream

    def _forget(self, stream: ListenStream) -> None:
        streams = self._by_label.get(stream.label)
        if streams is None or stream not in streams:
            return
        streams.discard(stream)
        if not streams:
            del self._by_label[stream.label]
        self._count -= 1
        left = self._per_caller.get(stream.caller, 1) - 1
        if left > 0:
            self._per_caller[stream.caller] = left
        else:
            self._per_caller.pop(stream.caller, None)

    # -- the fan-out (called by the Notifier, no await) --------------------------------
    def offer_event(self, event: ChangeEvent) -> int:
        """Offer one change to the listeners of the labels it touches; returns the offers made."""
        offered = 0
        kind = event.kind
        method = LIST_CHANGED[kind]
        audience = event.audience  # None (everyone) for all but a team's changes
        for label in event.labels:
            streams = self._by_label.get(label)
            if not streams:
                continue
            listed = event.changes_list_of(label)
            for stream in streams:
                if audience is not None:
                    visible = stream.visible_teams
                    if visible is not None and audience.isdisjoint(visible):
                        continue  # another team's change
                if listed and kind in stream.kinds:
                    offered += stream.offer(kind, method)
                if kind == "resource" and stream.match.subscriptions:
                    for uri in updated_uris(event, stream.match):
                        offered += stream.offer(("updated", uri), RESOURCE_UPDATED, uri)
        return offered

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        """Start the stall ticker: one task for all listeners, not a timer each."""
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick_forever(), name="listen-stall-ticker")

    async def _tick_forever(self) -> None:
        tick = max(0.1, min(1.0, self.stall_s / 4, self.keepalive_s))
        next_keepalive = time.monotonic() + self.keepalive_s
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            self.drop_stalled(now)
            if now >= next_keepalive:
                next_keepalive = now + self.keepalive_s
                for stream in self.streams():
                    if stream.keepalives:
                        stream.offer_keepalive()

    def drop_stalled(self, now: float) -> int:
        """Drop the listeners whose consumer has not come back for a message for ``stall_s``."""
        dropped = 0
        for stream in self.streams():
            since = stream.outside_since
            if since is not None and now - since >= self.stall_s:
                stream.drop(f"it took no write for {self.stall_s:g}s (limit {env_name('stream_stall_seconds')})")
                dropped += 1
        return dropped

    def close_token(self, token_id: int) -> int:
        closing = [stream for stream in self.streams() if stream.token_id == token_id]
        for stream in closing:
            stream.close()
        return len(closing)

    def close_all(self) -> None:
        """Graceful end of every listen (shutdown, SIGTERM drain): each writes its final result."""
        self.closing = True
        for stream in self.streams():
            stream.close()

    async def stop(self, wait_s: float = 1.0) -> None:
        """Close every listen and give their writers ``wait_s`` to write the final result."""
        self.close_all()
        deadline = time.monotonic() + wait_s
        while self._count and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None

    # -- HTTP --------------------------------------------------------------------------
    async def serve_sse(
        self, stream: ListenStream, receive: Receive, send: SendFn, headers: dict[str, str] | None = None
    ) -> None:
        """Write ``stream`` as the SSE response of the listen POST until either side ends it.

        No event ids (nothing is resumable in this era), keep-alive comments every
        ``keepalive_s``, ``X-Accel-Buffering: no``. Writing runs in a task of its own, so a drop
        can cancel a write blocked on a client that does not read; a disconnect ends the listen.
        """
        sse = SseStream(send)

        stream.keepalives = True
        stream.direct = sse.try_write

        async def write_all() -> None:
            # ``ListenStream._take`` inlined (this loop runs once per change per listener): while a
            # write waits for the client, ``outside_since`` is when it started (the ticker's stall).
            stream._consumer = asyncio.current_task()
            pending, wake, monotonic = stream.pending, stream.wake, time.monotonic
            await sse.start(headers=headers)
            while True:
                if stream.unfinished is not None:  # a direct write the client had no room for
                    await stream.unfinished
                    stream.unfinished = None
                    continue
                if pending:
                    item = pending.popitem(last=False)[1]
                    stream.outside_since = monotonic()
                    if item is _KEEPALIVE:
                        await sse.comment()
                    else:
                        await sse.event(stream.encode(item), event="message")
                    continue
                if stream.ended:
                    break
                if stream.closing:
                    stream.outside_since = monotonic()
                    await sse.event(stream.encode(_FINAL), event="message")
                    stream._end()
                    break
                stream.outside_since = None
                wake.clear()
                stream.idle = True  # offers now go to the service's flush
                try:
                    await wake.wait()
                finally:
                    stream.idle = False
            stream.outside_since = monotonic()  # a client that takes not even the end is dropped too
            await sse.close()

        try:
            with contextlib.suppress(OSError):  # the client is gone: nothing more to write
                await serve_until_disconnect(write_all(), receive, stream._end)
        finally:
            stream.idle = False
            if stream.unfinished is not None:  # never awaited (cancelled first): end the send
                stream.unfinished.close()
                stream.unfinished = None
            await stream.aclose()
