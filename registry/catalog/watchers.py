"""Waking the web pages that show an entry when someone saves it.

An open editor or entry page listens (a server-sent event stream) for saves of the entry it
shows, so it can say at once that someone else saved meanwhile. The source is the change log as
this process's change feed reads it (LISTEN/NOTIFY and polling on PostgreSQL), so a save made
through any replica wakes the pages open on every replica. This module only keeps who is waiting
for which entry and wakes them; the pages re-read the entry themselves.

Everything here runs on the event loop's thread (the feed dispatches there).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from registry.limits import LimitExceeded

EntryKey = tuple[str, str]


class EntryWatchers:
    """Who waits for changes to which entry, bounded by ``capacity`` waiters in all."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._waiting: dict[EntryKey, set[asyncio.Event]] = {}
        self.count = 0
        #: Open web UI event streams per signed-in session (``registry.ui.editor`` bounds them per session).
        self.streams: dict[str, int] = {}

    @contextmanager
    def watch(self, kind: str, name: str) -> Iterator[asyncio.Event]:
        """An event set whenever a change to ``kind``/``name`` is read from the change log (clear
        it before waiting again). Refused with ``LimitExceeded`` past the capacity."""
        if self.count >= self.capacity:
            raise LimitExceeded(
                "ui_event_streams", f"this server already follows {self.capacity} open pages; try again later"
            )
        key = (kind, name)
        event = asyncio.Event()
        self._waiting.setdefault(key, set()).add(event)
        self.count += 1
        try:
            yield event
        finally:
            self.count -= 1
            waiters = self._waiting.get(key)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiting[key]

    def publish(self, changed: Iterable[EntryKey]) -> None:
        """Wake whoever waits for one of these entries."""
        if not self._waiting:
            return
        for key in set(changed):
            for event in self._waiting.get(key, ()):
                event.set()
