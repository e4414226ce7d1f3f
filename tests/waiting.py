"""Waiting in tests for something another thread or process does: one helper, not a loop per file.

What a test waits for (a server thread to start, work done after an answer, a change feed to catch
up) happens on another thread or in another process, so the test polls for it with a deadline. A
time-out is a failed assertion that names what did not happen; ``unless`` ends the wait at once
when the thing waited on has died (a server thread that raised will never start).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], object],
    what: str | Callable[[], str],
    *,
    timeout: float = 10.0,
    interval: float = 0.05,
    unless: Callable[[], bool] | None = None,
) -> None:
    """Return once ``condition()`` is true; fail naming ``what`` (a callable is asked only on
    failure, for a diagnosis of the moment) after ``timeout`` seconds, or as soon as ``unless()``."""
    deadline = time.monotonic() + timeout
    while not condition():
        gave_up = unless is not None and unless()
        if gave_up or time.monotonic() > deadline:
            reason = what() if callable(what) else what
            raise AssertionError(f"{'gave up' if gave_up else f'timed out after {timeout:g}s'} waiting for {reason}")
        time.sleep(interval)


async def wait_until_async(
    condition: Callable[[], object],
    what: str | Callable[[], str],
    *,
    timeout: float = 10.0,
    interval: float = 0.01,
) -> None:
    """``wait_until`` for a test running on an event loop: polls with ``asyncio.sleep`` so that the
    tasks it waits for keep running on the same loop."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            reason = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:g}s waiting for {reason}")
        await asyncio.sleep(interval)
