"""A graceful stop answers the requests still running: "server restarting, retry", with their id.

On SIGTERM uvicorn stops accepting connections and waits up to its graceful-shutdown window
(``REGISTRY_SHUTDOWN_GRACE_S``) for the open ones to finish; then it cancels what still runs, and
a request cancelled that way was answered ``500 text/plain "Internal Server Error"`` (a
``tools/call`` waiting on a slow webhook, typically), which no MCP client can read. So the
requests that may wait (``McpServer.may_wait``: webhook calls, ``http`` resources, slow renders)
run under :meth:`StopWindow.run`, and when a stop begins (:meth:`StopWindow.begin`) a timer set
to end a little before uvicorn's window (:func:`cutoff_after`) cancels those still running; each
then answers a JSON-RPC error of its own, -32003 "the server is restarting" with the request's
id, on whatever the request was answering (a JSON body or its SSE stream), and its connection
ends before uvicorn would have cut it. The same error answers a request that starts after the
cutoff.

A request that was cancelled may have reached its webhook (the message says so): the client
decides whether the call is safe to retry. Requests answered straight from memory never wait
and are not tracked here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, Final

from registry.mcp.protocol import CATALOG_UNAVAILABLE, JsonRpcError, RequestId, error_message

log = logging.getLogger("registry.mcp")

#: What a request cut short by a stop is told (code -32003, as for an outage: retry elsewhere).
RESTARTING_MESSAGE: Final = (
    "the server is restarting and stopped this request before it finished; retry it (a tool call may "
    "already have reached its webhook)"
)
#: The most the cutoff comes before the end of uvicorn's graceful-shutdown window: time to write
#: the answers and close their connections.
MARGIN_S: Final = 1.0


def cutoff_after(grace_s: float) -> float:
    """Seconds from the stop signal to the cutoff: ``MARGIN_S`` before the window ends, or half
    way through a window shorter than twice that."""
    return max(grace_s - MARGIN_S, grace_s / 2)


def restarting(request_id: RequestId) -> dict[str, Any]:
    return error_message(request_id, JsonRpcError(CATALOG_UNAVAILABLE, RESTARTING_MESSAGE))


class StopWindow:
    """The requests of this process that may wait, and the cutoff that answers them on a stop."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()
        #: Tasks this window cancelled (so their cancellation is answered, not passed on).
        self._cut: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None
        #: The cutoff has passed: requests are answered "restarting" at once.
        self.cut_off = False

    def __len__(self) -> int:
        return len(self._running)

    async def run(self, work: Coroutine[Any, Any, dict[str, Any]], request_id: RequestId) -> dict[str, Any]:
        """``await work`` (a request's handler), answered "restarting" if the cutoff stops it."""
        if self.cut_off:
            work.close()
            return restarting(request_id)
        task = asyncio.current_task()
        assert task is not None
        self._running.add(task)
        try:
            return await work
        except asyncio.CancelledError:
            if task not in self._cut:
                raise  # the client's cancellation (or the process's): not ours to answer
            task.uncancel()
            return restarting(request_id)
        finally:
            self._running.discard(task)
            self._cut.discard(task)

    def begin(self, grace_s: float) -> None:
        """A stop began (on the event loop): cut what still runs ``cutoff_after(grace_s)`` from now."""
        if self._timer is None and not self.cut_off:
            self._timer = asyncio.get_running_loop().call_later(cutoff_after(grace_s), self.cut)

    def cut(self) -> int:
        """Cancel every running request now; each answers "restarting". Returns how many."""
        self.cut_off = True
        running = [task for task in self._running if not task.done()]
        if running:
            log.warning("stopping: %d request(s) still running are answered 'server restarting'", len(running))
        for task in running:
            self._cut.add(task)
            task.cancel()
        return len(running)
