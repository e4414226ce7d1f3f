"""Usage counts: how often each version of each entry is used, by which agent, per hour.

Agents' uses (``prompts/get`` -> ``get``, ``resources/read`` -> ``read``, ``tools/call`` ->
``call``) are counted on the hot path, so counting must cost next to nothing there: one tuple
and one dict update in memory (:meth:`UsageCounter.count`). A flusher task swaps the dict every
``usage_flush_s`` seconds and adds the counts to ``usage_counts`` in a worker thread, in one
transaction, with an additive upsert (``count = usage_counts.count + excluded.count``): several
replicas, each flushing its own counts, add up correctly, and a batch that could not be written
(the database is down) is merged back and written with the next one, so nothing counted is lost.
What one process holds is bounded (``REGISTRY_LIMIT_USAGE_PENDING_KEYS`` distinct keys): beyond
it, uses needing a new key are dropped, counted in ``registry_usage_dropped_total`` and logged.
On shutdown the flusher writes what it holds, within a bound of its own.

No locks: the counter belongs to one event loop. ``count``, ``flush``, ``start`` and ``stop`` are
called on that loop's thread only (MCP handlers run there; the database work runs in a worker
thread on a batch no other code touches any more).

The agent of a use is ``user:<subject>`` (single sign-on), else ``token:<id>``, else
``anonymous``: ``Principal.key``, so the admin API filters by the same string. The key is made
when a batch is written, not on the hot path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry
from sqlalchemy.dialects import postgresql, sqlite

from registry.db.engine import Database, deadline, is_unavailable, warn_unavailable
from registry.db.models import UsageCount

log = logging.getLogger("registry.usage")

#: ``method`` of a use, by MCP method.
GET, READ, CALL = "get", "read", "call"
#: Which method uses which kind of entry.
METHOD_BY_KIND = {"prompt": GET, "resource": READ, "tool": CALL}
#: How long a stopping process may spend writing its last counts (seconds).
FINAL_FLUSH_S = 5.0
#: Seconds in an hour bucket.
HOUR_S = 3600

#: In memory: (hour number since the epoch, kind, name, version, token id, user, method).
Key = tuple[int, str, str, int, int | None, str | None, str]
#: As stored: (hour, kind, name, version, agent, method).
RowKey = tuple[int, str, str, int, str, str]

_PRIMARY_KEY = ("hour", "kind", "name", "version", "agent", "method")


def agent_key(token_id: int | None, user: str | None) -> str:
    """``user:<subject>``, ``token:<id>`` or ``anonymous`` (as ``Principal.key``)."""
    if user:
        return f"user:{user}"
    if token_id is not None:
        return f"token:{token_id}"
    return "anonymous"


def hour_number(at: float | None = None) -> int:
    """The hour bucket of a wall-clock instant (``time.time()``): hours since the epoch."""
    return int((time.time() if at is None else at) // HOUR_S)


def hour_start(number: int) -> datetime:
    return datetime.fromtimestamp(number * HOUR_S, UTC)


class UsageCounter:
    """Counts uses in memory and adds them to ``usage_counts`` in batches (see the module)."""

    def __init__(self, db: Database, *, flush_s: float = 10.0, max_pending_keys: int = 100_000) -> None:
        self.db = db
        self.flush_s = max(0.05, float(flush_s))
        self.max_pending_keys = max(1, int(max_pending_keys))
        #: The current hour bucket; kept up to date by a timer at each hour's start (the hot path
        #: reads it instead of the clock).
        self.hour = hour_number()
        self._counts: dict[Key, int] = {}
        #: The batch being written (its keys count against the bound too).
        self._writing: dict[Key, int] = {}
        #: Uses not counted because the bound was reached; uses written; failed flushes.
        self.dropped = 0
        self.written = 0
        self.failures = 0
        self._dropped_logged = 0
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._stopping: asyncio.Event | None = None
        #: ``time.monotonic()`` by which the last flush must be done (set by ``stop``).
        self._final_deadline: float | None = None

    # ------------------------------------------------------------------ the hot path
    def count(self, kind: str, name: str, version: int, token_id: int | None, user: str | None, method: str) -> None:
        """One use of ``kind`` ``name`` at ``version`` by the caller (token id, SSO user).
        Event-loop thread only."""
        key = (self.hour, kind, name, version, token_id, user, method)
        counts = self._counts
        found = counts.get(key)
        if found is not None:
            counts[key] = found + 1
        elif len(counts) + len(self._writing) < self.max_pending_keys:
            counts[key] = 1
        else:
            self.dropped += 1

    @property
    def pending_keys(self) -> int:
        return len(self._counts) + len(self._writing)

    def pending(self) -> dict[Key, int]:
        """A copy of what is counted and not written yet (tests, diagnostics)."""
        merged = dict(self._writing)
        for key, n in self._counts.items():
            merged[key] = merged.get(key, 0) + n
        return merged

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the hour timer and the flusher on the running loop."""
        if self._task is not None:
            return
        self._stopping = asyncio.Event()
        self._next_hour()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="usage-flusher")

    async def stop(self, timeout_s: float = FINAL_FLUSH_S) -> None:
        """Write what is counted (within ``timeout_s``) and stop. Counts that cannot be written
        in time (the database is down or slow) are lost, and the log says how many."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task, self._task = self._task, None
        if task is None or self._stopping is None:
            return
        self._stopping.set()
        self._final_deadline = time.monotonic() + timeout_s
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        if not done:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        elif not task.cancelled() and task.exception() is not None:
            log.error("the usage flusher failed", exc_info=task.exception())
        lost = sum(self.pending().values())
        if lost:
            log.warning("%d counted uses could not be written before shutdown", lost)

    def _next_hour(self) -> None:
        """Set the current hour and schedule the next change at the next hour's start."""
        now = time.time()
        self.hour = hour_number(now)
        delay = max(0.01, (self.hour + 1) * HOUR_S - now + 0.001)
        self._timer = asyncio.get_running_loop().call_later(delay, self._next_hour)

    async def _run(self) -> None:
        stopping = self._stopping
        assert stopping is not None
        failures = self.failures
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.flush_s)
            failures = self.failures
            await self.flush()
        if self.failures == failures:  # not again if the database just failed: the stop is bounded
            await self.flush()  # what was counted while the last one was being written

    # ------------------------------------------------------------------ writing
    async def flush(self) -> int:
        """Add what is counted to the database; returns the number of uses written (0 also when
        the write failed: the batch is then kept for the next flush)."""
        if self._writing or not self._counts:
            return 0  # a flush is under way (only the flusher calls this), or nothing to write
        batch = self._writing = self._counts
        self._counts = {}
        # Shutting down: the database round trips must end within the stop's bound.
        final = self._final_deadline
        bounded = deadline(max(0.1, final - time.monotonic())) if final is not None else contextlib.nullcontext()
        try:
            with bounded:
                await asyncio.to_thread(write_counts, self.db, batch)
        except asyncio.CancelledError:
            raise  # shutting down past its bound: whether the thread wrote it is unknown
        except Exception as exc:
            self.failures += 1
            self._writing = {}
            self._merge(batch)
            if is_unavailable(exc):
                warn_unavailable(log, "usage counts are kept in memory until it is back", exc)
            else:
                log.exception("could not write usage counts; they are kept for the next flush")
            self._log_dropped()
            return 0
        self._writing = {}
        written = sum(batch.values())
        self.written += written
        self._log_dropped()
        return written

    def _merge(self, batch: dict[Key, int]) -> None:
        """Put a batch that could not be written back with the uses counted since."""
        counts = self._counts
        for key, n in batch.items():
            found = counts.get(key)
            if found is not None:
                counts[key] = found + n
            elif len(counts) < self.max_pending_keys:
                counts[key] = n
            else:
                self.dropped += n

    def _log_dropped(self) -> None:
        if self.dropped > self._dropped_logged:
            log.warning(
                "%d uses were not counted: %d usage counts were waiting to be written "
                "(limit REGISTRY_LIMIT_USAGE_PENDING_KEYS)",
                self.dropped - self._dropped_logged,
                self.max_pending_keys,
            )
            self._dropped_logged = self.dropped

    # ------------------------------------------------------------------ metrics
    def bind_metrics(self, registry: CollectorRegistry) -> None:
        """Expose the counter's figures on /metrics (read when scraped: nothing on the hot path)."""
        registry.register(_UsageCollector(self))


def write_counts(db: Database, batch: dict[Key, int]) -> None:
    """Add ``batch`` to ``usage_counts`` in one transaction (an additive upsert: INSERT ... ON
    CONFLICT (primary key) DO UPDATE SET count = usage_counts.count + excluded.count; SQLite
    3.24 or newer, PostgreSQL). Rows go in primary-key order, so two replicas writing the same
    keys at once wait for each other instead of deadlocking."""
    rows: dict[RowKey, int] = {}
    for (hour, kind, name, version, token_id, user, method), n in batch.items():
        key = (hour, kind, name, version, agent_key(token_id, user), method)
        rows[key] = rows.get(key, 0) + n
    values = [
        {"hour": hour_start(hour), "kind": kind, "name": name, "version": version, "agent": agent, "method": method}
        | {"count": rows[(hour, kind, name, version, agent, method)]}
        for hour, kind, name, version, agent, method in sorted(rows)
    ]
    if not values:
        return
    table: Any = UsageCount.__table__
    insert = postgresql.insert(table) if db.is_postgres else sqlite.insert(table)
    upsert = insert.on_conflict_do_update(
        index_elements=list(_PRIMARY_KEY), set_={"count": table.c.count + insert.excluded.count}
    )
    with db.session() as session:
        session.execute(upsert, values)


class _UsageCollector(Collector):
    def __init__(self, counter: UsageCounter) -> None:
        self.counter = counter

    def collect(self) -> Iterator[Any]:
        counter = self.counter
        yield GaugeMetricFamily(
            "registry_usage_pending_keys",
            "Usage counts held in memory, not yet added to the database",
            value=counter.pending_keys,
        )
        yield CounterMetricFamily(
            "registry_usage_written", "Uses added to the database by this process", value=counter.written
        )
        yield CounterMetricFamily(
            "registry_usage_dropped",
            "Uses not counted: REGISTRY_LIMIT_USAGE_PENDING_KEYS counts were waiting to be written",
            value=counter.dropped,
        )
        yield CounterMetricFamily(
            "registry_usage_flush_failures", "Usage flushes that failed (kept for the next one)", value=counter.failures
        )
