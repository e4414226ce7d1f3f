"""The asyncio task that delivers change events, in the process that holds the lease.

Each round: renew (or take) the lease; queue the events after each subscription's cursor; start a
send for every subscription whose oldest pending delivery is due and that has none in flight (at
most ``REGISTRY_LIMIT_EVENT_DELIVERIES_IN_FLIGHT`` at once); then sleep until poked (a change was
committed: this process's ``ChangeFeed`` hears every replica's), a send ended, the next retry is
due, or a third of the lease has passed. All database work runs in threads.

A send is one POST through the guarded outbound client (SSRF guard at connect time, no redirects,
the outbound caps) with the Standard Webhooks headers, bounded by
``REGISTRY_LIMIT_EVENT_DELIVERY_SECONDS``; any 2xx is delivered, anything else is retried with
back-off. A process killed mid-send leaves the delivery pending: the next holder sends it again,
with the same ``webhook-id`` (at-least-once; the in-flight ones are the only possible duplicates).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from registry import __version__
from registry.catalog.secrets import SecretBox
from registry.db.diskfull import is_full
from registry.db.engine import Database, describe, is_unavailable, warn_unavailable
from registry.db.models import utcnow
from registry.limits import Limits
from registry.webhooks import ForbiddenDestination, IPNetwork, OutboundClient, OutboundError, make_guarded_client
from registry.webhooks.caps import CapReached

from . import queue
from .lease import Held, Lease
from .signing import sign

log = logging.getLogger("registry.events")
#: Longest answer body read (and dropped) from a receiver.
ANSWER_BYTES = 16 * 1024
#: How long that read may take once the status is in (separate from the delivery's bound).
DRAIN_S = 1.0


class EventDeliverer:
    #: How long a stop waits to give the lease up (else it lapses by itself).
    RELEASE_S = 1.0
    #: How often the holder prunes old deliveries (``queue.KEEP_DAYS``).
    PRUNE_EVERY_S = 3600.0

    def __init__(
        self,
        db: Database,
        secrets: SecretBox,
        limits: Limits,
        *,
        allowed_networks: tuple[IPNetwork, ...] = (),
        lease_s: float = 30.0,
        retry_base_s: float = 5.0,
        retry_max_s: float = 600.0,
        max_attempts: int = 10,
        poll_s: float = 2.0,
        clock: Callable[[], datetime] = utcnow,
        on_attempt: Callable[[str], None] | None = None,
    ) -> None:
        """``on_attempt``: told each attempt's outcome (``delivered``, ``retry``, ``failed``: given up,
        ``unrecorded``: the lease moved on), for ``/metrics``."""
        self.db = db
        self.secrets = secrets
        self.limits = limits
        self.allowed = allowed_networks
        self.lease = Lease(db, lease_s, clock=clock)
        self.retry_base_s = retry_base_s
        self.retry_max_s = retry_max_s
        self.max_attempts = max_attempts
        self.poll_s = poll_s
        self.clock = clock
        self.on_attempt = on_attempt
        self.held: Held | None = None
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._sending: dict[int, asyncio.Task[None]] = {}
        self._client: OutboundClient | None = None
        self._pruned_at = -self.PRUNE_EVERY_S
        #: Subscriptions already warned of as undecryptable (one warning each, not one per attempt).
        self._warned: set[int] = set()

    # ---------------------------------------------------------------- control

    def poke(self) -> None:
        """Look at the change log now. Safe from any thread."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._client = make_guarded_client(self.allowed, timeout=self.limits.event_delivery_seconds, limits=self.limits)
        self._task = asyncio.create_task(self._run(), name="event-deliverer")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._cancel_sends()
        if self.held is not None:
            self.held = None
            try:
                # Bounded: a stop must not wait on a database that does not answer.
                await asyncio.wait_for(asyncio.to_thread(self.lease.release), self.RELEASE_S)
            except Exception as exc:  # the lease then expires by itself
                log.warning("could not give up the event delivery lease: %s", describe(exc))
        if self._client is not None:
            await self._client.aclose()

    async def _cancel_sends(self) -> None:
        sending, self._sending = self._sending, {}
        for task in sending.values():
            task.cancel()
        for task in sending.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # ---------------------------------------------------------------- the loop

    async def _run(self) -> None:
        failing = False
        while True:
            wait_s = self.lease.seconds / 3
            try:
                wait_s = min(wait_s, await self.round())
                if failing:
                    log.warning("event delivery works again")
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if is_unavailable(exc) or is_full(exc):  # an outage, a full disk: one warning, not one per round
                    if not failing:
                        warn_unavailable(log, "event delivery", exc)
                else:
                    log.exception("event delivery round failed")
                failing = True
                wait_s = min(wait_s, max(self.poll_s, 1.0))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, wait_s)):
                    await self._wake.wait()
            self._wake.clear()

    async def round(self) -> float:
        """One round; how long to sleep at most before the next."""
        held = await asyncio.to_thread(self.lease.acquire)
        if held != self.held:
            if held is None:
                log.warning("event delivery lease lost; this process stops delivering")
                await self._cancel_sends()
            else:
                log.info("this process delivers change events (lease epoch %d)", held.epoch)
            self.held = held
        if held is None:
            return self.lease.seconds / 3
        await asyncio.to_thread(queue.queue_new, self.db, self.limits)
        if time.monotonic() - self._pruned_at >= self.PRUNE_EVERY_S:
            self._pruned_at = time.monotonic()
            pruned = await asyncio.to_thread(queue.prune, self.db, self.clock())
            if pruned:
                log.info("pruned %d event deliveries older than %d days", pruned, queue.KEEP_DAYS)
        busy = {sid for sid, task in self._sending.items() if not task.done()}
        waiting = await asyncio.to_thread(queue.due, self.db, self.secrets, busy, self.clock())
        room = self.limits.event_deliveries_in_flight - len(busy)
        for item in waiting.due[: max(0, room)]:
            task = asyncio.create_task(self._deliver(item, held), name=f"event-delivery-{item.webhook_id}")
            self._sending[item.subscription_id] = task
            task.add_done_callback(lambda _t: self._wake.set())
        for sid in [sid for sid, task in self._sending.items() if task.done()]:
            del self._sending[sid]
        wait_s = self.poll_s
        if waiting.next_at is not None:
            wait_s = min(wait_s, max(0.0, (waiting.next_at - self.clock()).total_seconds()))
        return wait_s

    async def _deliver(self, item: queue.Due, held: Held) -> None:
        if item.error is not None:
            outcome = queue.Outcome(None, item.error)
            if item.subscription_id not in self._warned:
                self._warned.add(item.subscription_id)
                log.warning("event subscription %d: %s", item.subscription_id, item.error)
        else:
            outcome = await self.send(item)
        if not outcome.ok and item.error is None:
            log.info("event %s to subscription %d: %s", item.webhook_id, item.subscription_id, outcome.error)
        try:
            written = await asyncio.to_thread(
                queue.record,
                self.db,
                item,
                held,
                outcome,
                retry_base_s=self.retry_base_s,
                retry_max_s=self.retry_max_s,
                max_attempts=self.max_attempts,
                clock=self.clock,
            )
        except Exception as exc:  # the delivery stays pending: sent again later, with the same webhook-id
            if is_unavailable(exc) or is_full(exc):
                warn_unavailable(log, "event delivery", exc)
            else:
                log.exception("event %s: its outcome could not be recorded", item.webhook_id)
            return
        if not written:
            log.warning(
                "event %s: its outcome was not recorded (the lease moved on, or it was redelivered)", item.webhook_id
            )
        if self.on_attempt is not None:
            given_up = item.attempts + 1 >= self.max_attempts
            self.on_attempt(
                "unrecorded" if not written else "delivered" if outcome.ok else "failed" if given_up else "retry"
            )

    async def send(self, item: queue.Due) -> queue.Outcome:
        """POST one delivery; the outcome (never raises but for cancellation)."""
        client = self._client
        assert client is not None, "start() first"
        content = item.body.encode()
        timestamp = int(time.time())
        try:
            headers = [
                ("Content-Type", "application/json"),
                ("User-Agent", f"mcp-registry/{__version__}"),
                ("webhook-id", item.webhook_id),
                ("webhook-timestamp", str(timestamp)),
                ("webhook-signature", " ".join(sign(key, item.webhook_id, timestamp, content) for key in item.secrets)),
            ]
            exchange = client.stream("POST", item.url, content=content, headers=headers, caller="events")
            async with asyncio.timeout(self.limits.event_delivery_seconds):
                response = await exchange.__aenter__()
            status = response.status_code
        except TimeoutError:
            return queue.Outcome(
                None,
                f"no answer within {self.limits.event_delivery_seconds:g}s "
                "(limit REGISTRY_LIMIT_EVENT_DELIVERY_SECONDS)",
            )
        except ForbiddenDestination as exc:
            return queue.Outcome(None, f"refused by the SSRF guard: {exc}")
        except CapReached as exc:
            return queue.Outcome(None, str(exc))
        except OutboundError as exc:
            return queue.Outcome(None, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a bug, not the receiver's failure: logged, and retried like one
            log.exception("event %s could not be sent", item.webhook_id)
            return queue.Outcome(None, f"could not be sent ({type(exc).__name__}); see the server's log")
        # The status is the answer: what follows is only drained, within its own bound, and can
        # no longer turn a delivered event into a failure (and ten redeliveries).
        await _drain_and_close(exchange, response)
        if 200 <= status < 300:
            return queue.Outcome(status, None)
        return queue.Outcome(status, f"HTTP {status}")


async def _drain_and_close(exchange: Any, response: Any) -> None:
    """Read (and drop) at most ``ANSWER_BYTES`` of the answer within ``DRAIN_S``, then close it; a
    receiver that trickles its body, or breaks off, only has its connection closed."""
    try:
        async with asyncio.timeout(DRAIN_S):
            read = 0
            async for chunk in response.aiter_raw():
                read += len(chunk)
                if read > ANSWER_BYTES:
                    break
    except asyncio.CancelledError:
        await _close(exchange)
        raise
    except Exception:  # the outcome is already decided; the rest does not matter
        pass
    await _close(exchange)


async def _close(exchange: Any) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(DRAIN_S):
            await exchange.__aexit__(None, None, None)
