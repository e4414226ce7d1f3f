"""Running renders off the event loop, with a hard deadline and bounded concurrency.

A Jinja render is CPU work in Python: run on the event loop, one heavy prompt would stall every
other request of the process (``/healthz`` included). So renders run in worker threads, in two
lanes:

* **quick lane** — every render starts here, without waiting for a slot, and may use a short
  slice of CPU time (``QUICK_CPU_SECONDS``). Almost every prompt finishes well inside it, so
  light prompts stay fast however busy the heavy lane is.
* **heavy lane** — a render that used up its slice is stopped and started again (rendering has no
  side effects) in a lane of ``limits.render_concurrency`` threads, where it may run until its
  deadline. A heavy prompt therefore holds at most that many threads, however often it is called.

Every render has one wall-clock deadline, ``limits.render_seconds`` from the moment it was asked
for, covering both lanes and the wait for a heavy slot. The caller gets a clear error at the
deadline; the render's own budget (``registry.catalog.render_budget``) stops the thread at its
next check, and a heavy slot is only given back once its thread has really finished.

Templates that are literal text with bare ``{{ name }}`` substitutions cannot be slow: callers
pass ``inline=True`` and they render right here, without a thread hop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from registry.catalog.render_budget import NeedsMoreTime, RenderBudget, RenderLimitError, render_scope
from registry.limits import DEFAULT_LIMITS, Limits

T = TypeVar("T")

#: CPU time a render may use before it must move to the heavy lane.
QUICK_CPU_SECONDS = 0.02
#: Threads of the quick lane (each holds a render for at most its CPU slice).
QUICK_THREADS = 4
#: How long past the deadline the caller waits for the render's own budget to stop it (which
#: words the error better) before giving up on the thread.
GRACE_SECONDS = 0.1


class RenderRunner:
    """Runs render callables (which read the current ``RenderBudget``) in the quick or heavy lane."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self._heavy_slots = asyncio.Semaphore(limits.render_concurrency)
        self._slots_loop: asyncio.AbstractEventLoop | None = None
        # Created on first use (and again after close()): a server that never renders a Jinja
        # template starts no threads.
        self._pools: dict[str, ThreadPoolExecutor] = {}

    def _pool(self, lane: str) -> ThreadPoolExecutor:
        pool = self._pools.get(lane)
        if pool is None:
            workers = QUICK_THREADS if lane == "quick" else self.limits.render_concurrency
            pool = self._pools[lane] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"render-{lane}")
        return pool

    def _slots(self) -> asyncio.Semaphore:
        """The heavy lane's slots, for the running loop (a semaphore is bound to one loop; tests
        run one server under several)."""
        loop = asyncio.get_running_loop()
        if self._slots_loop is not loop:
            self._heavy_slots = asyncio.Semaphore(self.limits.render_concurrency)
            self._slots_loop = loop
        return self._heavy_slots

    async def run(self, render: Callable[[], T], *, inline: bool = False) -> T:
        """``render()`` under a fresh budget. Raises ``TemplateError`` (a limit's error names it)."""
        try:
            return await self._run(render, inline=inline)
        except ValueError as exc:  # ArgumentError, TemplateError: the caller answers their message
            # Their traceback runs through the frames that hold the futures holding the error, a
            # reference cycle: the request (its arguments: megabytes in a flood of refused calls)
            # would stay alive until the next full garbage collection. Without it, freed at once.
            exc.__traceback__ = None
            raise exc

    async def _run(self, render: Callable[[], T], *, inline: bool) -> T:
        budget = RenderBudget(self.limits)
        if inline:
            with render_scope(budget):
                return render()
        try:
            return await self._in_thread(self._pool("quick"), budget, render, quick=True)
        except NeedsMoreTime:
            pass
        slots = self._slots()
        remaining = budget.deadline - time.monotonic()
        try:
            await asyncio.wait_for(slots.acquire(), timeout=max(remaining, 0.001))
        except TimeoutError:
            raise self._busy() from None
        if time.monotonic() >= budget.deadline:  # a slot, but no time left to use it
            slots.release()
            raise self._busy()
        release = slots.release
        return await self._in_thread(self._pool("heavy"), budget.fresh(), render, quick=False, release=release)

    def _busy(self) -> RenderLimitError:
        return RenderLimitError(
            "render_concurrency",
            f"{self.limits.render_concurrency} long template renders are already running; try again shortly",
        )

    async def _in_thread(
        self,
        pool: ThreadPoolExecutor,
        budget: RenderBudget,
        render: Callable[[], T],
        *,
        quick: bool,
        release: Callable[[], None] | None = None,
    ) -> T:
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        try:
            future: Future[T] = pool.submit(context.run, _run_in_budget, budget, render, quick)
        except BaseException:
            if release is not None:
                release()
            raise
        if release is not None:
            # The slot is free again only when the thread is: a render past its deadline still
            # counts against the heavy lane until its budget has stopped it.
            future.add_done_callback(lambda _done: _call_soon(loop, release))
        waiter = asyncio.wrap_future(future, loop=loop)
        timeout = max(budget.deadline - time.monotonic(), 0.0) + GRACE_SECONDS
        try:
            return await asyncio.wait_for(waiter, timeout=timeout)
        except TimeoutError:
            budget.cancelled = True
            raise budget.timeout_error() from None
        except asyncio.CancelledError:
            budget.cancelled = True  # the request was cancelled: stop its render too
            raise

    def close(self) -> None:
        """Let the worker threads go; running renders end at their next budget check."""
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            pool.shutdown(wait=False, cancel_futures=True)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    with contextlib.suppress(RuntimeError):  # a closed loop: nothing waits for the slot any more
        loop.call_soon_threadsafe(callback)


def _run_in_budget(budget: RenderBudget, render: Callable[[], T], quick: bool) -> T:
    if quick:
        budget.quick_cpu_until = time.thread_time() + QUICK_CPU_SECONDS
    with render_scope(budget):
        return render()
