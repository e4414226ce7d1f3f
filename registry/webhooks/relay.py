"""Relaying a tool call's progress and log notifications at a bounded rate.

An NDJSON webhook can write thousands of progress lines a second, and each one would become an MCP
notification written to the caller's stream (and, on a replica-shared session, more work besides).
The client gains nothing from more than a few updates a second, so a :class:`NotificationRelay`
sits between the webhook reader and the caller's callbacks and lets at most ``per_second`` through
in any one-second window:

* progress is *coalesced*: while no slot is free only the latest value is kept, and it goes out as
  soon as one frees up (a timer sends it even if the webhook falls silent); the final value is
  always sent when the call ends, so a client's progress bar finishes;
* log messages cannot be merged, so those that find no free slot are dropped and counted, and a
  note saying how many (and which limit did it) goes out in the next free slot and at the end.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from registry.limits import LimitExceeded

from ._types import LogCallback, ProgressCallback

__all__ = ["NotificationRelay"]

_Progress = tuple[float, float | None, str | None]


class NotificationRelay:
    """Wraps ``on_progress``/``on_log``; use :meth:`progress` and :meth:`log` in their place, then
    :meth:`finish` when the call succeeded or :meth:`aclose` on every way out."""

    def __init__(
        self,
        on_progress: ProgressCallback | None,
        on_log: LogCallback | None,
        per_second: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if per_second <= 0:
            raise ValueError("per_second must be positive")
        self._on_progress = on_progress
        self._on_log = on_log
        self._per_second = per_second
        #: ``count`` sends per ``window`` seconds: ``per_second`` when it is 1 or more.
        self._count = max(1, int(per_second))
        self._window = self._count / per_second
        self._clock = clock
        self._sent: deque[float] = deque()
        self._pending: _Progress | None = None
        self._dropped = 0
        self._lock = asyncio.Lock()
        self._timer: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ the callbacks

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self._on_progress is None:
            return
        async with self._lock:
            self._pending = (progress, total, message)
            await self._pump()

    async def log(self, level: str, data: Any) -> None:
        if self._on_log is None:
            return
        async with self._lock:
            await self._pump()
            if self._dropped == 0 and self._free_slot():
                self._take_slot()
                await self._on_log(level, data)
            else:
                self._dropped += 1
                self._schedule()

    # ------------------------------------------------------------------ the end of the call

    async def finish(self) -> None:
        """Send what is still held, whatever the rate: the final progress and the drop note."""
        await self.aclose()
        async with self._lock:
            await self._send_held()

    async def aclose(self) -> None:
        """Stop the timer (without sending anything more)."""
        timer, self._timer = self._timer, None
        if timer is not None and not timer.done():
            timer.cancel()
        if timer is not None:
            # Retrieves the timer's exception, if a callback it ran raised one (its own
            # cancellation included: return_exceptions keeps it from ending *this* task).
            await asyncio.gather(timer, return_exceptions=True)

    # ------------------------------------------------------------------ internals

    def _free_slot(self) -> bool:
        now = self._clock()
        while self._sent and now - self._sent[0] >= self._window:
            self._sent.popleft()
        return len(self._sent) < self._count

    def _take_slot(self) -> None:
        self._sent.append(self._clock())

    def _drop_note(self) -> str:
        count, self._dropped = self._dropped, 0
        plural = "message was" if count == 1 else "messages were"
        return str(
            LimitExceeded(
                "progress_per_second",
                f"{count} log {plural} dropped: a tool's notifications are relayed at most "
                f"{self._per_second:g} times a second",
            )
        )

    async def _send_held(self) -> None:
        if self._dropped and self._on_log is not None:
            await self._on_log("warning", self._drop_note())
        if self._pending is not None and self._on_progress is not None:
            pending, self._pending = self._pending, None
            await self._on_progress(*pending)

    async def _pump(self) -> None:
        """Send the drop note, then the pending progress, as far as free slots allow (lock held)."""
        if self._dropped and self._free_slot():
            self._take_slot()
            assert self._on_log is not None
            await self._on_log("warning", self._drop_note())
        if self._pending is not None and self._free_slot():
            self._take_slot()
            pending, self._pending = self._pending, None
            assert self._on_progress is not None
            await self._on_progress(*pending)
        if self._pending is not None or self._dropped:
            self._schedule()

    def _schedule(self) -> None:
        if self._timer is None or self._timer.done():
            self._timer = asyncio.get_running_loop().create_task(self._send_later())

    async def _send_later(self) -> None:
        while self._pending is not None or self._dropped:
            wait = 0.0
            if len(self._sent) >= self._count:
                wait = self._sent[0] + self._window - self._clock()
            await asyncio.sleep(max(wait, 0.0) + 0.001)
            async with self._lock:
                # Scheduling from here is a no-op: this task is the timer and is still running.
                await self._pump()
