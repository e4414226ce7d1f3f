"""Change notifications: from the change log to every connected client whose view changed.

``ChangeFeed`` follows the change log. It is poked by the in-process signal (a write made by
this process), by PostgreSQL NOTIFY (a write made by another replica) and by a slow poll (a
missed NOTIFY, or another process on the same SQLite file); whatever pokes it, it reads the rows
after the last id it dispatched, in order, so nothing is skipped or sent twice.

``Notifier`` first has the served snapshots apply the changes (so a client told of a change and
asking again is answered the new content), then turns each change into the MCP notifications a
client should get: the list_changed notification of the entry's kind when what the client's
label lists changed (the change row says which labels: a template- or content-only edit alters
no list), and ``notifications/resources/updated`` for subscribed URIs whose content the change
may alter. SSE event ids are ``<change id>:<n>`` (``:0`` the list_changed, ``:1``... the updated
URIs, sorted), so a client that reconnects with ``Last-Event-ID`` gets exactly what it missed.

Teams: a change row names its ``audience`` (the teams whose view it alters, ``*`` everyone). A
client is sent a change's notifications only if it sees every team (an admin), or the audience
holds ``*`` or one of its ``visible_teams``: live, replayed, on listen streams, on every replica
(the audience travels in the change log). Worked out once per change (``ChangeEvent.audience`` is
None for everyone), so a change for everyone costs each stream one comparison more, and a team's
change one set intersection per stream of its label.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import select

from registry.catalog.uritemplates import UriTemplate
from registry.db.changelog import NOTIFY_CHANNEL, changes_after, last_change_id
from registry.db.engine import Database, describe, is_unavailable
from registry.db.listener import listen_forever
from registry.db.models import Change, McpSession
from registry.mcp.protocol import dumps, notification
from registry.mcp.sessions import ClientState

log = logging.getLogger("registry.mcp")

LIST_CHANGED = {
    "prompt": "notifications/prompts/list_changed",
    "resource": "notifications/resources/list_changed",
    "tool": "notifications/tools/list_changed",
}
RESOURCE_UPDATED = "notifications/resources/updated"
#: The same bytes go to every stream: encoded once.
_ENCODED_LIST_CHANGED = {kind: dumps(notification(method)) for kind, method in LIST_CHANGED.items()}


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    id: int
    kind: str
    name: str
    action: str
    labels: frozenset[str]
    uris: tuple[str, ...]
    created_at: datetime
    #: The labels whose lists the change alters (see ``Change.listing_changed``); None: all of ``labels``.
    listing_changed: frozenset[str] | None = None
    #: The teams whose view the change alters; None: everyone (``*`` in ``Change.audience``, or a
    #: row from before teams). Only clients that see one of them (or every team) are told.
    audience: frozenset[str] | None = None

    @classmethod
    def from_row(cls, row: Change) -> ChangeEvent:
        created = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)
        listed = None if row.listing_changed is None else frozenset(row.listing_changed)
        audience = None if row.audience is None or "*" in row.audience else frozenset(row.audience)
        return cls(
            row.id, row.kind, row.name, row.action, frozenset(row.labels), tuple(row.uris), created, listed, audience
        )

    def reaches(self, visible_teams: frozenset[str] | None) -> bool:
        """Whether a client seeing ``visible_teams`` (None: every team) may hear of this change."""
        audience = self.audience
        return audience is None or visible_teams is None or not audience.isdisjoint(visible_teams)

    def changes_list_of(self, label: str) -> bool:
        """Whether a client served ``label`` lists something different after this change."""
        listed = self.labels if self.listing_changed is None else self.listing_changed
        return label in listed


def _subscribed(uri_or_template: str, subscriptions: Iterable[str]) -> list[str]:
    if "{" not in uri_or_template:
        return [uri_or_template] if uri_or_template in subscriptions else []
    template = UriTemplate(uri_or_template)
    return [uri for uri in subscriptions if template.match(uri) is not None]


def updated_uris(change: ChangeEvent, client: ClientState) -> list[str]:
    """The subscribed URIs a resource change touches, sorted: SSE ids number them (``<change>:<n>``),
    and a replay, perhaps in another process, must number them the same way."""
    if change.kind != "resource" or not client.subscriptions:
        return []
    found: set[str] = set()
    for changed in change.uris:
        found.update(_subscribed(changed, client.subscriptions))
    return sorted(found)


def keyed_messages_for(change: ChangeEvent, client: ClientState) -> list[tuple[int, Hashable, dict[str, Any]]]:
    """The notifications ``change`` produces for ``client``, each with its index within the change
    (the ``<n>`` of its SSE id: 0 the list_changed, 1... the updated URIs, whether or not a
    list_changed is sent, so live and replayed events are numbered alike) and its coalescing key:
    a later message of the same key (the list_changed of a kind, the resources/updated of a URI)
    makes an earlier one redundant, since the client re-lists or re-reads what it names."""
    if client.label not in change.labels or not change.reaches(client.visible_teams):
        return []
    messages: list[tuple[int, Hashable, dict[str, Any]]] = []
    if change.changes_list_of(client.label):
        messages.append((0, change.kind, notification(LIST_CHANGED[change.kind])))
    for index, uri in enumerate(updated_uris(change, client), start=1):
        messages.append((index, ("updated", uri), notification(RESOURCE_UPDATED, {"uri": uri})))
    return messages


def messages_for(change: ChangeEvent, client: ClientState) -> list[dict[str, Any]]:
    """The notifications ``change`` produces for ``client`` (none when what it is served did not change)."""
    return [message for _index, _key, message in keyed_messages_for(change, client)]


def parse_event_id(value: str | None) -> tuple[int, int] | None:
    """``"<change>:<n>"`` or ``"<change>"`` (everything of that change seen) -> (change, last index)."""
    if not value:
        return None
    head, _, tail = value.strip().partition(":")
    try:
        return int(head), (int(tail) if tail else 1 << 30)
    except ValueError:
        return None


def _where(task: asyncio.Task[Any]) -> str:
    """Where a task is suspended (its innermost frame), for a log line."""
    frames = task.get_stack()
    if not frames:
        return "?"
    frame = frames[-1]
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


class ChangeFeed:
    #: How long ``stop`` waits for the follower and the listener to end.
    STOP_S = 1.0

    def __init__(
        self,
        db: Database,
        on_changes: Callable[[list[ChangeEvent], Callable[[int], None]], Awaitable[None]],
        poll_s: float = 2.0,
    ) -> None:
        self.db = db
        #: How long the feed waits for a poke before it reads the change log anyway.
        self.poll_s = poll_s
        self.on_changes = on_changes
        #: The id of the last change dispatched; streams opened now see live everything after it.
        self.position = 0
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.listening = False
        #: More LISTEN channels (name -> callback), e.g. session ends from other replicas.
        self.extra_channels: dict[str, Callable[[str], None]] = {}

    def _advance(self, position: int) -> None:
        self.position = max(self.position, position)

    def poke(self) -> None:
        """Look at the change log now. Safe from any thread."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.position = await asyncio.to_thread(self._last_id)
        self._tasks.append(asyncio.create_task(self._follow(), name="change-feed-follow"))
        if self.db.is_postgres:
            channels = {NOTIFY_CHANNEL: self._on_notify, **self.extra_channels}
            listener = listen_forever(self.db.url, channels, self._on_listening, options=self.db.libpq_options())
            self._tasks.append(asyncio.create_task(listener, name="change-feed-listen"))

    def _on_notify(self, payload: str) -> None:
        self._wake.set()

    def _on_listening(self) -> None:
        self.listening = True
        self._wake.set()  # catch up on whatever was committed while not listening

    async def stop(self) -> None:
        """Cancel the follower and the listener and wait for them, at most ``STOP_S``.

        Shutdown must not hang on them (a stdio host waits for its child to exit): a task that
        lost its cancellation is cancelled again half-way, and one still running at the deadline
        is logged, with where it waits, and left behind.
        """
        tasks, self._tasks = self._tasks, []
        if not tasks:
            return
        for task in tasks:
            task.cancel()
        done, pending = await asyncio.wait(tasks, timeout=self.STOP_S / 2)
        if pending:
            log.warning(
                "change feed task(s) %s still running %.1fs after being cancelled (a lost cancellation?); "
                "cancelling again",
                ", ".join(sorted(task.get_name() for task in pending)),
                self.STOP_S / 2,
            )
            for task in pending:
                task.cancel()
            more, pending = await asyncio.wait(pending, timeout=self.STOP_S / 2)
            done |= more
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.warning("change feed task %s ended with %r", task.get_name(), task.exception())
        for task in pending:
            log.error(
                "change feed task %s still running %.1fs after stop, left behind; it waits at %s",
                task.get_name(),
                self.STOP_S,
                _where(task),
            )

    def _last_id(self) -> int:
        with self.db.session() as session:
            return last_change_id(session)

    def _read_after(self, after: int) -> list[ChangeEvent]:
        with self.db.session() as session:
            return [ChangeEvent.from_row(row) for row in changes_after(session, after, limit=1000)]

    async def read_range(self, after: int, upto: int) -> list[ChangeEvent]:
        """Changes in (after, upto], for replaying a resumed stream."""
        events: list[ChangeEvent] = []
        while after < upto:
            batch = await asyncio.to_thread(self._read_after, after)
            batch = [event for event in batch if event.id <= upto]
            if not batch:
                break
            events.extend(batch)
            after = batch[-1].id
        return events

    async def _woken_or_polled(self) -> None:
        """Until poked, or ``poll_s`` passed.

        Not ``asyncio.wait_for``: on Python 3.11 it drops a cancellation that arrives in the loop
        turn in which the wait ends (CPython gh-86296, fixed in 3.12 only), and ``_follow`` then
        polls forever: ``stop`` never returned when the LISTEN connection came up (and poked the
        feed) just as stdin closed, so the stdio child hung instead of exiting. ``asyncio.timeout``
        tells its own cancellation from the caller's.
        """
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.poll_s):
                await self._wake.wait()

    async def _follow(self) -> None:
        # While the database is down every poll fails: say so once when it starts and once when it
        # ends, not with a traceback per poll.
        failing_since: float | None = None
        while True:
            await self._woken_or_polled()
            self._wake.clear()
            try:
                while True:
                    events = await asyncio.to_thread(self._read_after, self.position)
                    if not events:
                        break
                    await self.on_changes(events, self._advance)
                    self._advance(events[-1].id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if failing_since is None:
                    failing_since = time.monotonic()
                    if is_unavailable(exc):
                        log.warning(
                            "cannot read the change log, the database is unavailable (%s); retrying", describe(exc)
                        )
                    else:
                        log.exception("reading the change log failed; retrying")
                await asyncio.sleep(1.0)
            else:
                if failing_since is not None:
                    log.warning("reading the change log again, after %.1fs", time.monotonic() - failing_since)
                    failing_since = None


class ChangeListeners(Protocol):
    """Listeners fed beside the session streams, in the same loop turn (``ListenService``)."""

    def __len__(self) -> int: ...

    def offer_event(self, event: ChangeEvent) -> int: ...


class Notifier:
    """Delivers change notifications to the streams of this process."""

    #: Stream offers made between two turns of the event loop while dispatching.
    DISPATCH_WORK = 20_000
    #: Change ids read per query when replaying.
    REPLAY_PAGE = 1000

    def __init__(
        self,
        hub: Any,
        db: Database,
        apply: Callable[[list[ChangeEvent]], Awaitable[None]] | None = None,
    ) -> None:
        self.hub = hub
        self.db = db
        #: Brings the served snapshots up to date with the events (``SnapshotCache.apply``), before
        #: anyone is told: a client that re-lists on list_changed gets the new list.
        self.apply = apply
        #: Called once per change with (seconds from commit to send, notifications queued): /metrics.
        self.lag_observer: Callable[[float, int], None] | None = None
        #: stdio-style clients that are not on the hub: (state, write).
        self.direct: list[tuple[ClientState, Callable[[dict[str, Any]], Awaitable[None]]]] = []
        #: ``subscriptions/listen`` streams (2026-07-28), offered each change right after the session
        #: streams: the same change log, the same per-label decision.
        self.listeners: ChangeListeners | None = None

    async def refresh_subscriptions(self, session_ids: list[str]) -> dict[str, set[str]]:
        """Subscriptions may have been changed through another replica: read them from the database."""
        if not session_ids:
            return {}

        def load() -> dict[str, set[str]]:
            with self.db.session() as session:
                rows = session.execute(
                    select(McpSession.id, McpSession.subscriptions).where(McpSession.id.in_(session_ids))
                ).all()
                return {row[0]: set(row[1]) for row in rows}

        return await asyncio.to_thread(load)

    async def dispatch(self, events: list[ChangeEvent], advance: Callable[[int], None]) -> None:
        """Offer each client the notifications the events produce for it, advancing the feed as it goes.

        Offers are keyed, so a stream coalesces what it has not written yet (see streams.py): a
        replica catching up on a thousand changes leaves each stream a few pending events, and no
        reading client is dropped for it. The work is done in slices of about ``DISPATCH_WORK``
        offers with a turn of the event loop between them, so writers and requests keep running.
        """
        if self.apply is not None:
            # Raises when the database cannot be read: nothing was offered yet and the feed has not
            # advanced, so the feed retries this same batch (and the snapshots keep serving).
            await self.apply(events)
        # Governance events (append_event: a team, a token, a change request) name no labels: no
        # client's view changed, so nobody is told (the feed still moves past them).
        events = [event for event in events if event.labels]
        if any(event.kind == "resource" for event in events):
            persisted = [
                s for s in self.hub.streams() if getattr(s.client, "id", "") and getattr(s, "persistent", False)
            ]
            fresh = await self.refresh_subscriptions(sorted({s.session_id for s in persisted}))
            for stream in persisted:
                if stream.session_id in fresh:
                    stream.client.subscriptions = fresh[stream.session_id]
        start = 0
        while start < len(events):
            if start:
                await asyncio.sleep(0)
            # From here to advance() there is no await: a stream registering now either was already
            # registered (and gets this slice live) or will note the advanced position (and not replay it).
            streams = list(self.hub.streams())
            listening = len(self.listeners) if self.listeners is not None else 0
            end = start + max(1, self.DISPATCH_WORK // max(1, len(streams) + listening))
            self._offer(events[start:end], streams)
            advance(events[min(end, len(events)) - 1].id)
            start = end
        for event in events:
            for client, write in self.direct:
                for message in messages_for(event, client):
                    await write(message)

    def _offer(self, events: list[ChangeEvent], streams: list[Any]) -> None:
        now = time.time()
        for event in events:
            first_id = f"{event.id}:0"
            kind = event.kind
            # One item per change (and per updated URI) shared by every stream told of it: the
            # hub's flush encodes each once (streams.py).
            item = (first_id, _ENCODED_LIST_CHANGED[kind])
            updated: dict[tuple[int, str], tuple[str, bytes]] = {}
            audience = event.audience  # None (everyone) for all but a team's changes
            labels = event.labels
            listed: dict[str, bool] = {}
            sent_for_event = 0
            for stream in streams:
                client = stream.client
                label = client.label
                if label not in labels:
                    continue
                if audience is not None:
                    visible = client.visible_teams
                    if visible is not None and audience.isdisjoint(visible):
                        continue  # another team's change: nothing of it reaches this client
                changed = listed.get(label)
                if changed is None:
                    changed = listed[label] = event.changes_list_of(label)
                if changed:
                    sent_for_event += stream.offer(item, kind)
                if kind == "resource" and client.subscriptions:
                    for index, uri in enumerate(updated_uris(event, client), start=1):
                        message = updated.get((index, uri))
                        if message is None:
                            data = dumps(notification(RESOURCE_UPDATED, {"uri": uri}))
                            message = updated[index, uri] = (f"{event.id}:{index}", data)
                        sent_for_event += stream.offer(message, ("updated", uri))
            if self.listeners is not None:
                sent_for_event += self.listeners.offer_event(event)
            if sent_for_event and self.lag_observer is not None:
                # Once per change: every stream of it was served in this same loop.
                self.lag_observer(max(0.0, now - event.created_at.timestamp()), sent_for_event)

    async def replay(
        self, feed: ChangeFeed, client: ClientState, last_event_id: str | None, upto: int
    ) -> list[tuple[str, bytes]]:
        """The events a stream resuming after ``last_event_id`` missed, up to change ``upto``.

        Coalesced like live events (the newest per kind and per URI, in id order), so a client
        that was away for a million changes is sent a handful of events, each with an id at least
        that of every change it stands for. The change log is read a page at a time.
        """
        parsed = parse_event_id(last_event_id)
        if parsed is None:
            return []
        after_change, after_index = parsed
        latest: OrderedDict[Hashable, tuple[str, bytes]] = OrderedDict()
        low = max(0, after_change - 1)
        while low < upto:
            high = min(upto, low + self.REPLAY_PAGE)
            for event in await feed.read_range(low, high):
                for index, key, message in keyed_messages_for(event, client):
                    if event.id == after_change and index <= after_index:
                        continue
                    latest.pop(key, None)
                    latest[key] = (f"{event.id}:{index}", dumps(message))
            low = high
        return list(latest.values())
