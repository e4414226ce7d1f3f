"""Holding an HTTP response open for as long as its work runs and its client stays.

Every long response (an MCP GET stream, a ``subscriptions/listen`` stream, a stateless request
that may wait on a webhook, the web UI's test call) has the same two ends: the work finishes, or
the client goes away and the work is cancelled, since nobody can read what it would write. Once
the body is read, ``http.disconnect`` is the only message left for ``receive`` to give, so
watching it costs one task that waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from starlette.types import Receive

T = TypeVar("T")


async def serve_until_disconnect(
    work: Awaitable[T], receive: Receive, on_disconnect: Callable[[], object] | None = None
) -> T | None:
    """``await work`` unless the client disconnects first: its value, or None when it was cancelled.

    A disconnect calls ``on_disconnect`` (so a stream takes nothing more) and cancels the work in
    the same loop turn; the work is cancelled too when the caller is. Either way it has ended when
    this returns or raises (its webhook connection closed, its slot free to be given back). Work
    cancelled from elsewhere (a stream dropped for not reading) is None too; its exceptions propagate.
    """
    task = asyncio.ensure_future(work)

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if on_disconnect is not None:
            on_disconnect()
        task.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    return None if task.cancelled() else task.result()
