"""The MCP side of a running registry: dispatcher, sessions, streams, change notifications."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy import text

from registry.catalog.audit_verify import chain_head
from registry.catalog.usage import UsageCounter
from registry.catalog.validation import PRODUCTION
from registry.db.engine import is_unavailable, warn_unavailable
from registry.mcp.client_requests import CLIENT_RESPONSE_CHANNEL
from registry.mcp.listen import ListenService
from registry.mcp.notifier import ChangeEvent, ChangeFeed, Notifier
from registry.mcp.server import McpServer
from registry.mcp.sessions import SESSION_END_CHANNEL, ClientState, Session, SessionStore
from registry.mcp.streams import StreamHub
from registry.metrics import RegistryMetrics
from registry.runtime import Registry
from registry.tokens import TOKEN_CHANGED_CHANNEL, TOKEN_REVOKED_CHANNEL

if TYPE_CHECKING:
    from registry.tracing.sdk import Tracing

log = logging.getLogger("registry.mcp")
audit_log = logging.getLogger("registry.audit")


class McpRuntime:
    SWEEP_INTERVAL_S = 60.0

    def __init__(self, registry: Registry, *, freeze_gc: bool = False, tracing: Tracing | None = None) -> None:
        settings = registry.settings
        self.freeze_gc = freeze_gc
        self.registry = registry
        self.metrics = RegistryMetrics()
        self.server = McpServer(
            registry.catalog,
            webhook_allowed_networks=settings.webhook_allowed_networks,
            limits=settings.limits,
            cache_ttl_ms=settings.cache_ttl_ms,
            tracing=tracing,
        )
        self.server.observe = self.metrics.observe_request
        #: Uses per entry version and agent (None: REGISTRY_USAGE=false, nothing is counted).
        self.usage: UsageCounter | None = None
        if settings.usage_enabled:
            self.usage = UsageCounter(
                registry.db, flush_s=settings.usage_flush_s, max_pending_keys=settings.limits.usage_pending_keys
            )
            self.usage.bind_metrics(self.metrics.registry)
        self.server.usage = self.usage
        self.sessions = SessionStore(
            registry.db,
            idle_timeout_s=settings.session_idle_timeout_s,
            flush_s=settings.session_flush_s,
            max_pending=settings.limits.session_pending_writes,
        )
        self.hub = StreamHub(
            keepalive_s=min(StreamHub.KEEPALIVE_S, settings.session_idle_timeout_s / 4),
            stall_s=settings.limits.stream_stall_seconds,
        )
        #: ``subscriptions/listen`` streams (2026-07-28): fed by the same notifier as session streams.
        self.listen = ListenService(settings.limits, keepalive_s=self.hub.keepalive_s)
        self.notifier = Notifier(self.hub, registry.db, self.server.snapshots.apply)
        self.notifier.listeners = self.listen
        self.notifier.lag_observer = self._observe_lag
        self.feed = ChangeFeed(registry.db, self._dispatch, settings.change_poll_s)
        self.feed.extra_channels[SESSION_END_CHANNEL] = self._session_ended_elsewhere
        self.feed.extra_channels[TOKEN_REVOKED_CHANNEL] = self._token_revoked_elsewhere
        # A token whose teams changed is treated alike: forgotten, its streams closed.
        self.feed.extra_channels[TOKEN_CHANGED_CHANNEL] = self._token_revoked_elsewhere
        registry.tokens.on_revoke(self._token_revoked_here)
        registry.catalog.on_change(lambda _change_id: self.feed.poke())
        self.server.on_state_change = self._save_state
        self.metrics.bind_gauges(
            lambda: len(self.sessions.cached()), lambda: self.hub.open_streams, lambda: self.sessions.pending
        )
        #: Told of every batch of changes the feed reads (any replica's): the event deliverer's wake-up.
        self.change_observers: list[Callable[[], None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        #: When the audit head was last logged (the first sweep logs it).
        self._head_logged_at = -self.HEAD_LOG_INTERVAL_S
        self._loop: asyncio.AbstractEventLoop | None = None

        from registry.mcp.transports.legacy_sse import LegacySseTransport
        from registry.mcp.transports.streamable_http import StreamableHttpTransport

        self.streamable_http = StreamableHttpTransport(self.server, self.sessions, registry.tokens, settings, self.hub)
        self.streamable_http.feed = self.feed
        self.streamable_http.notifier = self.notifier
        self.streamable_http.listen = self.listen
        self.legacy_sse = LegacySseTransport(self.server, self.sessions, registry.tokens, settings, self.hub)
        # A client's answer to a server-to-client request may reach another replica (no affinity):
        # it is forwarded over PostgreSQL to the one running the call.
        self.client_requests = self.streamable_http.client_requests
        if registry.db.is_postgres:
            self.client_requests.forward = self._forward_client_response
            self.feed.extra_channels[CLIENT_RESPONSE_CHANNEL] = self.client_requests.deliver_forwarded

    async def _forward_client_response(self, payload: str) -> None:
        def notify() -> None:
            with self.registry.db.session() as db_session:
                values = {"channel": CLIENT_RESPONSE_CHANNEL, "payload": payload}
                db_session.execute(text("SELECT pg_notify(:channel, :payload)"), values)

        await asyncio.to_thread(notify)

    def _session_ended_elsewhere(self, session_id: str) -> None:
        self.sessions.evict(session_id)
        self.hub.close_session(session_id)

    def _token_revoked_here(self, token_id: int) -> None:
        """A revocation or a change of teams made by this process (any thread): close the token's
        streams here now (other replicas hear of it on TOKEN_REVOKED_CHANNEL / TOKEN_CHANGED_CHANNEL)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._close_token, token_id)

    def _close_token(self, token_id: int) -> None:
        self.hub.close_token(token_id)
        self.listen.close_token(token_id)

    def _token_revoked_elsewhere(self, payload: str) -> None:
        """A revocation or a change of teams announced on PostgreSQL (by any replica): forget cached
        verifications, so the token is refused or seen anew at once, and close its streams here."""
        self.registry.tokens.forget_cached()
        try:
            token_id = int(payload)
        except ValueError:
            log.warning("ignoring malformed token revocation payload %r", payload[:32])
            return
        self._close_token(token_id)

    def _observe_lag(self, seconds: float, count: int) -> None:
        self.metrics.notifications_sent.inc(count)
        self.metrics.notification_lag.observe(seconds)

    async def _dispatch(self, events: list[ChangeEvent], advance: Callable[[int], None]) -> None:
        self.registry.watchers.publish((event.kind, event.name) for event in events if event.labels)
        for observer in self.change_observers:
            observer()
        await self.notifier.dispatch(events, advance)

    async def _save_state(self, client: ClientState) -> None:
        if isinstance(client, Session) and client.id:
            await self.sessions.save_state(client)

    async def _sweep_forever(self) -> None:
        interval = min(self.SWEEP_INTERVAL_S, self.registry.settings.session_idle_timeout_s / 2)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except Exception as exc:
                if is_unavailable(exc):  # an outage: one warning, not a traceback a minute
                    warn_unavailable(log, "session sweep", exc)
                else:
                    log.exception("session sweep failed")

    async def sweep(self) -> int:
        """Remove expired sessions and close their streams on this replica; record tokens that
        expired since (``token_expired`` in the audit trail) and log the audit chain's head."""
        expired = await self.sessions.sweep()
        for session_id in expired:
            self.hub.close_session(session_id)
        if expired:
            log.info("swept %d expired MCP sessions", len(expired))
        await asyncio.to_thread(self._audit_housekeeping)
        return len(expired)

    #: How often the audit chain's head is logged (an anchor kept by whatever keeps the logs).
    HEAD_LOG_INTERVAL_S = 3600.0

    def _audit_housekeeping(self) -> None:
        self.registry.tokens.record_expired()
        now = time.monotonic()
        if now - self._head_logged_at >= self.HEAD_LOG_INTERVAL_S:
            head = chain_head(self.registry.db)
            if head is not None:
                audit_log.info("audit head: change #%d mac %s (keep it: `audit verify --anchor`)", head.id, head.mac)
            self._head_logged_at = now

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.sessions.start()
        self.hub.start()
        self.listen.start()
        await self.feed.start()
        # From here on the feed applies every change to the served snapshots, and a write made
        # through this process waits for its own (read-your-writes).
        self.server.snapshots.follow(self.feed.poke, self.feed.position)
        try:
            await self.server.snapshots.get(PRODUCTION)
        except Exception:
            log.exception("could not build the production catalog snapshot; it will be retried on demand")
        if self.freeze_gc:
            # Move everything alive now (imports, app, the first snapshot) out of the collector's
            # reach: full collections over ~200k long-lived objects were 100-500 ms pauses under
            # load, most of the serving p99. Snapshots built later stay collectable as usual.
            # (A server process only: in a process running many apps, tests, it would pin them all.)
            gc.collect()
            gc.freeze()
        self._tasks.append(asyncio.create_task(self._sweep_forever()))
        if self.usage is not None:
            self.usage.start()

    def drain(self) -> None:
        """Close every stream now (SIGTERM): clients reconnect, to another replica if this one is going;
        requests still running when uvicorn's graceful window is about to end are answered "server
        restarting" (registry/mcp/stopping.py). Callable from any thread, and from a signal handler."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._close_all()
        else:
            loop.call_soon_threadsafe(self._close_all)
        # The timer is set from a loop callback: a signal handler may have interrupted the loop itself.
        loop.call_soon_threadsafe(self.server.stopping.begin, self.registry.settings.shutdown_grace_s)

    def _close_all(self) -> None:
        self.hub.close_all()
        self.listen.close_all()  # each listen ends with its final result (a graceful end)

    async def stop(self) -> None:
        if self.usage is not None:
            await self.usage.stop()  # first: the counts are written even if a later step hangs
        await self.sessions.stop()  # sessions written behind: a restart loses none
        await self.listen.stop()
        await self.hub.stop()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.feed.stop()
        await self.server.aclose()
