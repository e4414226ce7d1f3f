"""The MCP dispatcher: one method table, shared by every transport.

Transports turn bytes into ``Message`` objects and hand them here with a ``RequestContext``
that says who is calling (``ClientState``) and where request-related notifications go. Nothing
here knows about HTTP, stdio or how a client is identified.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Container, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from registry import __version__
from registry.catalog.render_runner import RenderRunner
from registry.catalog.rendering import ArgumentError
from registry.catalog.service import CatalogService
from registry.catalog.templates import TemplateError
from registry.catalog.tool_calls import call_tool
from registry.catalog.usage import UsageCounter
from registry.catalog.validation import PRODUCTION
from registry.db.diskfull import is_full
from registry.db.engine import is_unavailable, warn_unavailable
from registry.limits import DEFAULT_LIMITS, LimitExceeded, Limits
from registry.mcp.completions import CompletionHistory, suggestions
from registry.mcp.input_required import (
    KEY_PURPOSE,
    Binding,
    RequestStateSigner,
    arguments_digest,
    prompt_arguments,
    run_stateless,
    run_with_session,
)
from registry.mcp.protocol import (
    ALL_VERSIONS,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LOG_LEVELS,
    LOG_SEVERITY,
    META_SERVER_INFO,
    METHOD_NOT_FOUND,
    RESOURCE_NOT_FOUND,
    JsonRpcError,
    Message,
    RequestId,
    catalog_unavailable_error,
    error_message,
    negotiate_version,
    notification,
    result_message,
)
from registry.mcp.render_cache import RenderCache
from registry.mcp.sessions import ClientState
from registry.mcp.snapshot import CatalogSnapshot, SnapshotCache, sees
from registry.mcp.spent_states import SpentStates
from registry.mcp.stopping import StopWindow
from registry.webhooks import (
    HttpResourceCache,
    OutboundClient,
    WebhookAnswer,
    caller_key,
    make_guarded_client,
    parse_networks,
)

if TYPE_CHECKING:
    from registry.mcp.http_common import Scope
    from registry.mcp.snapshot import ServedEntry
    from registry.tracing.sdk import Tracing

log = logging.getLogger("registry.mcp")

PAGE_SIZE = 100
SERVER_INFO = {"name": "mcp-registry", "version": __version__}
INSTRUCTIONS = (
    "This server is the team's shared registry: prompts are curated templates (fill in their arguments), "
    "resources are reference documents, tools call team services."
)
CAPABILITIES: dict[str, Any] = {
    "prompts": {"listChanged": True},
    "resources": {"subscribe": True, "listChanged": True},
    "tools": {"listChanged": True},
    "completions": {},
    "logging": {},
}
#: ``_meta["io.modelcontextprotocol/serverInfo"]`` of every stateless-era result.
MODERN_SERVER_INFO = {**SERVER_INFO, "title": "MCP Registry"}
#: Stateless-era results that carry caching hints (``ttlMs``, ``cacheScope``).
CACHEABLE = frozenset(
    {"server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"}
)
#: Session-era methods the stateless revisions removed (-32601 there).
SESSION_ONLY = frozenset({"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"})
#: Default ``ttlMs`` (setting ``REGISTRY_CACHE_TTL_MS``): short, since catalogs change under agents.
DEFAULT_CACHE_TTL_MS = 5000

Send = Callable[[dict[str, Any]], Awaitable[None]]
#: ``await ask(method, params)`` -> the client's result (raises JsonRpcError for its error answer).
Ask = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(slots=True)
class RequestContext:
    client: ClientState
    request_id: RequestId | None = None
    #: Where notifications related to this request go (the request's SSE stream, stdout, ...).
    send: Send | None = None
    progress_token: str | int | None = None
    session_id: str | None = None
    #: A 2026-07-28 (stateless) request: ``client`` was built from this request's ``_meta`` alone.
    modern: bool = False
    #: The client's address (after trusted proxy headers), where nothing else says who calls: an
    #: anonymous stateless request's outbound calls are capped per address.
    peer: str | None = None
    #: Session era only: send a server-to-client request related to this one (``elicitation/create``,
    #: ``sampling/createMessage``, ``roots/list``) and wait for the client's result. None where the
    #: transport cannot (and always in the stateless era, which uses input-required results instead).
    ask: Ask | None = None
    #: The HTTP request's ASGI scope (None: stdio): the transport and trace-context headers, for tracing.
    scope: Scope | None = None
    #: The catalog entry this request served, once known (its version and team, for tracing).
    entry: ServedEntry | None = None

    @property
    def outbound_caller(self) -> str:
        """Whose webhook calls and fetches these are, for the per-caller outbound cap."""
        return caller_key(self.client.token_id, self.client.user, self.session_id, self.peer)

    async def notify(self, message: dict[str, Any]) -> None:
        if self.send is not None:
            await self.send(message)

    async def log(self, level: str, data: Any, logger: str = "mcp-registry") -> None:
        threshold = self.client.log_level
        if threshold is None or LOG_SEVERITY.get(level, 0) < LOG_SEVERITY[threshold]:
            return
        await self.notify(notification("notifications/message", {"level": level, "logger": logger, "data": data}))

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self.progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.notify(notification("notifications/progress", params))


def _encode_cursor(list_name: str, after: str) -> str:
    """An opaque cursor: the list it belongs to and the key (entry name) of the last item returned."""
    data = json.dumps({"l": list_name, "k": after}, separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


#: Longest cursor accepted: one made for the longest name fits many times over (names are 1-128
#: characters; a longer cursor was not made by this server).
MAX_CURSOR_CHARS = 1024


def _decode_cursor(cursor: Any, list_name: str) -> str | None:
    """The key to continue after (None: from the start); -32602 for anything this server did not
    issue for this list."""
    if cursor is None:
        return None
    try:
        if not isinstance(cursor, str) or len(cursor) > MAX_CURSOR_CHARS:
            raise ValueError
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        after = data["k"]
        if data["l"] != list_name or not isinstance(after, str):
            raise ValueError
        return after
    except (ValueError, KeyError, TypeError, binascii.Error, RecursionError):  # RecursionError: [[[[... cursors
        raise JsonRpcError(INVALID_PARAMS, "invalid cursor") from None


def _page(snapshot: CatalogSnapshot, params: dict[str, Any], list_name: str, client: ClientState) -> dict[str, Any]:
    """One page of a list as ``client`` is shown it (global entries and its teams'), keyset-paged
    by entry name: a cursor names the last entry returned, so entries added or removed before it
    (edits between two pages) neither repeat nor skip any."""
    after = _decode_cursor(params.get("cursor"), list_name)
    items, last = snapshot.page(list_name, after, PAGE_SIZE, client.visible_teams, encoded=True)
    result: dict[str, Any] = {list_name: items}
    if last is not None:
        result["nextCursor"] = _encode_cursor(list_name, last)
    return result


def _require_str(params: dict[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise JsonRpcError(INVALID_PARAMS, f'"{key}" is required and must be a string')
    return value


Handler = Callable[[dict[str, Any], RequestContext], Awaitable[dict[str, Any]]]


class McpServer:
    def __init__(
        self,
        catalog: CatalogService,
        *,
        webhook_allowed_networks: str = "",
        limits: Limits | None = None,
        cache_ttl_ms: int = DEFAULT_CACHE_TTL_MS,
        tracing: Tracing | None = None,
    ) -> None:
        self.catalog = catalog
        #: OpenTelemetry (None: off): server spans around the entry points below, client spans of
        #: webhook calls and ``http`` resource fetches.
        self.tracing = tracing
        #: The dispatcher's entry points, which every transport calls. Attributes, not methods: with
        #: tracing on they are :meth:`answer_request` and :meth:`answer_notification` wrapped in
        #: server spans (registry/mcp/tracing.py); with it off they are those methods themselves,
        #: and tracing costs not even a check.
        self.handle_request: Callable[[Message, RequestContext], Coroutine[Any, Any, dict[str, Any]]] = (
            self.answer_request
        )
        self.handle_notification: Callable[[Message, ClientState], Coroutine[Any, Any, None]] = self.answer_notification
        if tracing is not None:
            from registry.mcp.tracing import McpSpans

            spans = McpSpans(tracing)
            self.handle_request = spans.wrap_request(self.answer_request)
            self.handle_notification = spans.wrap_notification(self.answer_notification)
        #: ``ttlMs`` of cacheable stateless-era results.
        self.cache_ttl_ms = max(0, int(cache_ttl_ms))
        self.limits = limits or DEFAULT_LIMITS
        self.snapshots = SnapshotCache(catalog)
        #: Values each caller used before (per token or session, per label): completion suggestions.
        self.completions = CompletionHistory(self.limits)
        #: Renders off the event loop: a deadline, and at most ``render_concurrency`` heavy ones at once.
        self.renders = RenderRunner(self.limits)
        self.render_cache = RenderCache()
        #: Requests that may wait, answered "server restarting" if a graceful stop cuts them short.
        self.stopping = StopWindow()
        #: Stateless-era ``requestState`` tokens already answered (in the database: every replica's).
        self.spent_states = SpentStates(catalog.db)
        self._allowed = parse_networks(webhook_allowed_networks)
        self._client: OutboundClient | None = None
        self.http_resources = HttpResourceCache(
            self.http_client, self.limits, decrypt=catalog.secrets.decrypt, error=_resource_fetch_error
        )
        # A write made through this process waits until its change is applied to the served
        # snapshots (read-your-writes); the change feed applies it, then notifies clients.
        catalog.on_change(self._serve_own_write)
        self.methods: dict[str, Handler] = {
            "initialize": self.initialize,
            "ping": self.ping,
            "prompts/list": self.prompts_list,
            "prompts/get": self.prompts_get,
            "resources/list": self.resources_list,
            "resources/templates/list": self.resource_templates_list,
            "resources/read": self.resources_read,
            "resources/subscribe": self.resources_subscribe,
            "resources/unsubscribe": self.resources_unsubscribe,
            "tools/list": self.tools_list,
            "tools/call": self.tools_call,
            "completion/complete": self.completion_complete,
            "logging/setLevel": self.logging_set_level,
        }
        #: The stateless era's table: the same handlers, less the session-only methods, plus discovery.
        #: (``subscriptions/listen`` is a stream, served by the transports.)
        self.modern_methods: dict[str, Handler] = {
            name: handler for name, handler in self.methods.items() if name not in SESSION_ONLY
        }
        self.modern_methods["server/discover"] = self.discover
        #: Called after a client changes persistent state (log level, subscriptions).
        self.on_state_change: Callable[[ClientState], Awaitable[None]] | None = None
        #: Called with (method, seconds) after each request (request-latency metrics).
        self.observe: Callable[[str, float], None] | None = None
        #: Counts uses per entry version and agent (set by the runtime; None: not counted).
        self.usage: UsageCounter | None = None

    def _serve_own_write(self, change_id: int) -> None:
        self.snapshots.written(change_id)

    @functools.cached_property
    def request_states(self) -> RequestStateSigner:
        """Signs and checks the stateless era's ``requestState`` (a key derived from the secret key)."""
        return RequestStateSigner(self.catalog.secrets.derive_key(KEY_PURPOSE))

    def http_client(self) -> OutboundClient:
        if self._client is None:
            self._client = make_guarded_client(self._allowed, timeout=30.0, limits=self.limits, tracing=self.tracing)
        return self._client

    async def aclose(self) -> None:
        self.renders.close()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # ------------------------------------------------------------------ dispatch
    async def answer_request(self, message: Message, ctx: RequestContext) -> dict[str, Any]:
        """Answer one request with a JSON-RPC response message (never raises); its duration is
        observed (``observe``) however it ends."""
        assert message.method is not None and message.id is not None
        started = time.perf_counter()
        handler = (self.modern_methods if ctx.modern else self.methods).get(message.method)
        try:
            if ctx.modern:
                return await self._handle_modern(message, ctx, handler)
            if handler is None:
                raise JsonRpcError(METHOD_NOT_FOUND, f"method not found: {message.method[:128]}")  # never echo more
            if message.method not in ("initialize", "ping") and ctx.client.protocol_version is None:
                raise JsonRpcError(INVALID_REQUEST, "the session is not initialized; send initialize first")
            meta = message.params.get("_meta")
            if isinstance(meta, dict):
                token = meta.get("progressToken")
                if isinstance(token, str | int) and not isinstance(token, bool):
                    ctx.progress_token = token
            ctx.request_id = message.id
            return result_message(message.id, await handler(message.params, ctx))
        except JsonRpcError as exc:
            return error_message(message.id, exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if is_unavailable(exc):  # the database is down or frozen: a clear, retryable answer
                warn_unavailable(log, "MCP requests answer catalog unavailable", exc)
                return error_message(message.id, catalog_unavailable_error(is_full(exc)))
            log.exception("internal error handling %s", message.method)
            return error_message(message.id, JsonRpcError(INTERNAL_ERROR, "internal error"))
        finally:
            if self.observe is not None:
                self.observe(message.method if handler is not None else "(unknown)", time.perf_counter() - started)

    async def _handle_modern(self, message: Message, ctx: RequestContext, handler: Handler | None) -> dict[str, Any]:
        """A stateless-era request (the transport checked its ``_meta`` and headers): the same
        handlers (``handler``: from its own method table), and every result stamped as that
        revision requires."""
        assert message.method is not None and message.id is not None
        try:
            if handler is None:
                raise JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {message.method[:128]}")
            token = message.params["_meta"].get("progressToken")
            if isinstance(token, str | int) and not isinstance(token, bool):
                ctx.progress_token = token
            ctx.request_id = message.id
            result = await handler(message.params, ctx)
        except JsonRpcError as exc:
            if exc.code == RESOURCE_NOT_FOUND:  # 2026-07-28 has no -32002: not found is invalid params
                exc = JsonRpcError(INVALID_PARAMS, exc.message, exc.data)
            return error_message(message.id, exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if is_unavailable(exc):
                warn_unavailable(log, "MCP requests answer catalog unavailable", exc)
                return error_message(message.id, catalog_unavailable_error(is_full(exc)))
            log.exception("internal error handling %s", message.method)
            return error_message(message.id, JsonRpcError(INTERNAL_ERROR, "internal error"))
        return result_message(message.id, self.stamp(message.method, result, ctx.client))

    def stamp(self, method: str, result: dict[str, Any], client: ClientState) -> dict[str, Any]:
        """A stateless-era result: ``resultType``, ``_meta`` serverInfo and, on the six cacheable
        methods' complete results, caching hints. A copy: handlers may return shared objects."""
        stamped = dict(result)
        meta = stamped.get("_meta")
        stamped["_meta"] = (
            {**meta, META_SERVER_INFO: MODERN_SERVER_INFO}
            if isinstance(meta, dict)
            else {META_SERVER_INFO: MODERN_SERVER_INFO}
        )
        if "resultType" in stamped:  # e.g. "input_required": never cacheable
            return stamped
        stamped["resultType"] = "complete"
        if method in CACHEABLE:
            stamped["ttlMs"] = self.cache_ttl_ms
            public = method == "server/discover" or _public_view(client, self.snapshots.peek(client.label))
            stamped["cacheScope"] = "public" if public else "private"
        return stamped

    async def answer_notification(self, message: Message, client: ClientState) -> None:
        if message.method == "notifications/initialized":
            client.initialized = True
        elif message.method == "notifications/cancelled":
            request_id = message.params.get("requestId")
            task = client.in_flight.get(request_id) if isinstance(request_id, str | int) else None
            if task is not None and not task.done():
                task.cancel()

    def may_wait(self, method: str | None, params: dict[str, Any], client: ClientState) -> bool:
        """Whether answering may wait on the network or a worker thread (a webhook, an ``http``
        resource, a template render that is not inline): transports run such a request as a task of
        its own, so ``notifications/cancelled`` or a closed request can stop it. Anything else
        answers straight from the snapshot; a task per request would cost more than the answer."""
        if method == "tools/call":
            return True
        if method != "resources/read":
            return False
        uri = params.get("uri")
        snapshot = self.snapshots.peek(client.label)
        if not isinstance(uri, str) or len(uri) > self.limits.uri_chars:
            return False  # refused at once
        if snapshot is None:
            return True  # the snapshot is still being built
        entry = snapshot.find_resource(uri, client.visible_teams)
        if entry is None:
            return False
        return entry.resource_kind == "http" or not entry.renderer.renders_inline

    async def snapshot(self, ctx: RequestContext) -> CatalogSnapshot:
        return self.snapshots.peek(ctx.client.label) or await self.snapshots.get(ctx.client.label)

    # ------------------------------------------------------------------ lifecycle
    async def initialize(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        version = negotiate_version(params.get("protocolVersion"))
        client = ctx.client
        info = params.get("clientInfo")
        info = info if isinstance(info, dict) else {}
        capabilities = params.get("capabilities")
        capabilities = capabilities if isinstance(capabilities, dict) else {}
        # Both are stored with the session (a database row): a client may not make it arbitrarily large.
        size = len(json.dumps([info, capabilities], separators=(",", ":")).encode())
        if size > self.limits.session_metadata_bytes:
            raise _limit_error(
                "session_metadata_bytes",
                f"clientInfo and capabilities take {size} bytes; at most {self.limits.session_metadata_bytes}",
            )
        client.protocol_version = version
        client.client_info = info
        client.client_capabilities = capabilities
        server_info = dict(SERVER_INFO)
        if version >= "2025-06-18":
            server_info["title"] = "MCP Registry"
        return {
            "protocolVersion": version,
            "capabilities": CAPABILITIES,
            "serverInfo": server_info,
            "instructions": INSTRUCTIONS,
        }

    async def discover(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        """``server/discover``: what a stateless client may rely on, nothing caller-specific."""
        return {"supportedVersions": list(ALL_VERSIONS), "capabilities": CAPABILITIES, "instructions": INSTRUCTIONS}

    async def ping(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        return {}

    async def logging_set_level(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        level = params.get("level")
        if level not in LOG_LEVELS:
            raise JsonRpcError(INVALID_PARAMS, f"level must be one of: {', '.join(LOG_LEVELS)}")
        ctx.client.log_level = level
        if self.on_state_change is not None:
            await self.on_state_change(ctx.client)
        return {}

    # ------------------------------------------------------------------ prompts
    async def prompts_list(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        return _page(await self.snapshot(ctx), params, "prompts", ctx.client)

    async def prompts_get(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        name = _require_str(params, "name")
        client = ctx.client  # the snapshot, without a coroutine of its own when it is built (nearly always)
        snapshot = self.snapshots.peek(client.label) or await self.snapshots.get(client.label)
        visible = client.visible_teams
        entry = snapshot.prompt(name, visible)  # another team's prompt is unknown too
        if entry is None:
            raise JsonRpcError(INVALID_PARAMS, f"unknown prompt: {name}")
        ctx.entry = entry
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise JsonRpcError(INVALID_PARAMS, '"arguments" must be an object of strings')
        if ctx.modern:  # a missing required argument is asked of the user (input-required result)
            arguments, ask_user = prompt_arguments(
                name, entry.spec.arguments, arguments, params, ctx.client.client_capabilities
            )
            if ask_user is not None:
                return ask_user
        renderer = entry.renderer  # binding the arguments refuses undeclared ones (-32602), as previews do
        inline = renderer.renders_inline
        cache_key = self.render_cache.key(renderer, arguments) if inline else None
        result = self.render_cache.get(cache_key) if cache_key is not None else None
        if result is None:
            try:
                result = await self.renders.run(
                    lambda: renderer.render(
                        arguments, lambda uri: snapshot.read_static(uri, visible), limits=self.limits
                    ),
                    inline=inline,
                )
            except ArgumentError as exc:
                raise JsonRpcError(INVALID_PARAMS, f"prompt {name}: {exc}") from None
            except TemplateError as exc:
                raise JsonRpcError(INTERNAL_ERROR, f"prompt {name} could not be rendered: {exc}") from None
            if cache_key is not None:
                self.render_cache.put(cache_key, result)
        if arguments:
            self._remember_all(ctx, ("ref/prompt", name), arguments, renderer.declared)
        if self.usage is not None:  # a use: rendered (not refused, not asked for input)
            self.usage.count("prompt", entry.name, entry.version, client.token_id, client.user, "get")
        return result

    # ------------------------------------------------------------------ resources
    async def resources_list(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        return _page(await self.snapshot(ctx), params, "resources", ctx.client)

    async def resource_templates_list(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        return _page(await self.snapshot(ctx), params, "resourceTemplates", ctx.client)

    async def resources_read(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        uri = _require_str(params, "uri")
        if len(uri) > self.limits.uri_chars:
            raise _limit_error("uri_chars", f"the URI has {len(uri)} characters; at most {self.limits.uri_chars}")
        snapshot = await self.snapshot(ctx)
        entry = snapshot.find_resource(uri, ctx.client.visible_teams)  # another team's: not found too
        if entry is None:
            raise JsonRpcError(RESOURCE_NOT_FOUND, f"resource not found: {uri}", {"uri": uri})
        ctx.entry = entry
        if entry.spec.kind == "http":
            fetched = await self.http_resources.read(uri, entry.spec, caller=ctx.outbound_caller)
            if self.usage is not None:
                self.usage.count("resource", entry.name, entry.version, ctx.client.token_id, ctx.client.user, "read")
            return {"contents": fetched}
        renderer = entry.renderer
        try:
            contents = await self.renders.run(
                lambda: renderer.read(uri, limits=self.limits), inline=renderer.renders_inline
            )
        except TemplateError as exc:
            raise JsonRpcError(INTERNAL_ERROR, f"resource {uri} could not be rendered: {exc}") from None
        if contents is None:
            raise JsonRpcError(RESOURCE_NOT_FOUND, f"resource not found: {uri}", {"uri": uri})
        if entry.renderer.uri_template is not None:
            ref = ("ref/resource", entry.renderer.uri_template.template)
            variables = entry.renderer.uri_template.variable_names
            self._remember_all(ctx, ref, entry.renderer.match(uri) or {}, variables)
        if self.usage is not None:  # a use: read (not missing, not failed)
            self.usage.count("resource", entry.name, entry.version, ctx.client.token_id, ctx.client.user, "read")
        return {"contents": contents}

    async def resources_subscribe(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        uri = _require_str(params, "uri")
        if len(uri) > self.limits.uri_chars:
            raise _limit_error("uri_chars", f"the URI has {len(uri)} characters; at most {self.limits.uri_chars}")
        subscriptions = ctx.client.subscriptions
        if uri in subscriptions:
            return {}  # nothing changed: nothing to write
        if len(subscriptions) >= self.limits.subscriptions:
            raise _limit_error(
                "subscriptions", f"this session already holds {len(subscriptions)} subscriptions; unsubscribe first"
            )
        subscriptions.add(uri)
        if self.on_state_change is not None:
            await self.on_state_change(ctx.client)
        return {}

    async def resources_unsubscribe(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        uri = _require_str(params, "uri")
        if uri not in ctx.client.subscriptions:
            return {}  # nothing changed: nothing to write
        ctx.client.subscriptions.discard(uri)
        if self.on_state_change is not None:
            await self.on_state_change(ctx.client)
        return {}

    # ------------------------------------------------------------------ tools
    async def tools_list(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        return _page(await self.snapshot(ctx), params, "tools", ctx.client)

    async def tools_call(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        name = _require_str(params, "name")
        tool = (await self.snapshot(ctx)).tool(name, ctx.client.visible_teams)  # another team's: unknown too
        if tool is None:
            raise JsonRpcError(INVALID_PARAMS, f"unknown tool: {name}")
        ctx.entry = tool
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise JsonRpcError(INVALID_PARAMS, '"arguments" must be an object')

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            await ctx.progress(progress, total, message)

        async def on_log(level: str, data: Any) -> None:
            await ctx.log(level, data, logger=name)

        capabilities = ctx.client.client_capabilities
        # A use is a call made to the webhook, counted once per call on its first round (not on
        # the rounds that answer its input requests), whatever the webhook answered.
        uncounted = self.usage is not None and not (ctx.modern and params.get("requestState") is not None)

        async def step(responses: dict[str, Any] | None, state: str | None) -> WebhookAnswer:
            nonlocal uncounted
            # The same code path as the admin API's tool test (registry/catalog/tool_calls.py).
            answer = await call_tool(
                name,
                tool,
                arguments,
                client=self.http_client(),
                caller=ctx.outbound_caller,
                limits=self.limits,
                request_id=ctx.request_id,
                session_id=ctx.session_id,
                on_progress=on_progress,
                on_log=on_log,
                client_capabilities=capabilities,
                input_responses=responses,
                state=state,
                hook_services=self,
            )
            if uncounted:
                uncounted = False
                self._count_call(tool, arguments, answer, ctx.client)
            return answer

        # A webhook may ask for input mid-call (registry/mcp/input_required.py): a stateless
        # caller answers by retrying, a session is asked on its own channel.
        what = f"tool {name}"
        if ctx.modern:
            binding = Binding(
                "tool",
                name,
                tool.version,
                ctx.client.label,
                ctx.client.principal,
                ctx.client.token_id,
                arguments_digest(arguments),
            )
            return await run_stateless(
                step, params, capabilities, binding, self.request_states, what, self.spent_states.spend
            )
        return await run_with_session(step, ctx.ask, capabilities, what)

    def _count_call(self, tool: Any, arguments: dict[str, Any], answer: WebhookAnswer, client: ClientState) -> None:
        """Count a call that went to the webhook: not one refused for invalid arguments (an
        isError result made without calling it; only error results are checked again)."""
        if self.usage is None:
            return
        if isinstance(answer, dict) and answer.get("isError") and not tool.input_validator.is_valid(arguments):
            return
        self.usage.count("tool", tool.name, tool.version, client.token_id, client.user, "call")

    # ------------------------------------------------------------------ completion
    def _remember_all(
        self, ctx: RequestContext, ref: tuple[str, str], values: dict[str, Any], declared: Container[str]
    ) -> None:
        """Completion history is per token, user or session: an anonymous stateless caller has none
        of them (each of its requests is a stranger), so it keeps none. Nothing in the answer
        depends on it, so a failure to keep it is logged, not answered."""
        if values and (not ctx.modern or ctx.client.token_id is not None or ctx.client.user is not None):
            try:
                self.completions.remember_all(ctx.client, ref, values, declared)
            except Exception:
                log.exception("keeping the completion history failed")

    def _recall(self, ctx: RequestContext, ref: tuple[str, str], argument: str) -> list[str]:
        if ctx.modern and ctx.client.token_id is None and ctx.client.user is None:
            return []
        return self.completions.recall(ctx.client, ref, argument)

    async def completion_complete(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        ref = params.get("ref")
        argument = params.get("argument")
        if not isinstance(ref, dict) or not isinstance(argument, dict):
            raise JsonRpcError(INVALID_PARAMS, '"ref" and "argument" are required objects')
        arg_name = argument.get("name")
        prefix = argument.get("value", "")
        if not isinstance(arg_name, str) or not isinstance(prefix, str):
            raise JsonRpcError(INVALID_PARAMS, '"argument" needs string "name" and "value"')
        snapshot = await self.snapshot(ctx)
        visible = ctx.client.visible_teams
        candidates: list[str] = []
        if ref.get("type") == "ref/prompt":
            name = ref.get("name")
            entry = snapshot.prompt(name, visible) if isinstance(name, str) else None
            if entry is None:
                raise JsonRpcError(INVALID_PARAMS, f"unknown prompt: {name}")
            declared = next((a for a in entry.spec.arguments if a.name == arg_name), None)
            if declared is None:
                raise JsonRpcError(INVALID_PARAMS, f"prompt {name} has no argument {arg_name}")
            candidates += declared.enum or []
            if declared.default is not None:
                candidates.append(declared.default)
            candidates += self._recall(ctx, ("ref/prompt", entry.spec.name), arg_name)
        elif ref.get("type") == "ref/resource":
            uri = ref.get("uri")
            if isinstance(uri, str) and len(uri) > self.limits.uri_chars:
                raise _limit_error("uri_chars", f"the URI has {len(uri)} characters; at most {self.limits.uri_chars}")
            template = next(
                (t for t in snapshot.templates if sees(visible, t.team) and t.spec.uriTemplate == uri), None
            )
            if template is None:
                raise JsonRpcError(INVALID_PARAMS, f"unknown resource template: {uri}")
            if template.renderer.uri_template and arg_name not in template.renderer.uri_template.variables:
                raise JsonRpcError(INVALID_PARAMS, f"resource template {uri} has no variable {arg_name}")
            candidates += self._recall(ctx, ("ref/resource", str(uri)), arg_name)
        else:
            raise JsonRpcError(INVALID_PARAMS, 'ref.type must be "ref/prompt" or "ref/resource"')
        return {"completion": suggestions(candidates, prefix)}


def _public_view(client: ClientState, snapshot: CatalogSnapshot | None) -> bool:
    """Whether what a caller is served depends on nobody, so that a shared cache may hand it to
    anyone: an anonymous caller on the default label, shown global entries only (a token's label,
    or a chosen ``?label=``, makes the view the caller's own: private; so does a signed-in user).
    A caller without identity that sees teams (stdio sees them all) is shown what anonymous
    callers are only while the label serves no team entries; then it is public too."""
    if client.token_id is not None or client.user is not None or client.label != PRODUCTION:
        return False
    visible = client.visible_teams
    if visible is not None and not visible:
        return True
    return snapshot is not None and not snapshot.has_team_entries


def _limit_error(limit: str, message: str) -> JsonRpcError:
    """A -32602 whose message names the limit (``... (limit REGISTRY_LIMIT_<NAME>)``)."""
    return JsonRpcError(INVALID_PARAMS, str(LimitExceeded(limit, message)))


def _resource_fetch_error(message: str) -> JsonRpcError:
    """How a failed ``http`` resource fetch reaches the agent (the message names no address)."""
    return JsonRpcError(INTERNAL_ERROR, message)
