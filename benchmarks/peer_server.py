#!/usr/bin/env python3
"""The peer: the official MCP Python SDK's server (``mcp``, pinned in the test extras) serving the
benchmark catalog from memory, on Streamable HTTP at ``http://HOST:PORT/mcp`` under uvicorn.

It is what the registry's figures are divided by: a server anyone can rebuild from ``pip install
-e '.[test]'``, measured in the same run on the same machine, so the ratio means something where
absolute requests/s do not. As shipped it runs the SDK's defaults: asyncio + h11, answers in SSE
(``--json-response`` is its faster mode, the one the targets are read against).

``--broadcast-registry`` adds a measuring hook that is NOT an SDK feature: it records every
initialized session and serves ``POST /admin/broadcast`` (awaits ``send_prompt_list_changed()`` for
each: the SDK has no fan-out of its own, so this is what a server on it would write),
``POST /admin/publish`` (``PromptsListChanged`` on the SDK's subscription bus, reaching
``subscriptions/listen`` streams) and ``GET /admin/count``. ``fanout.py`` uses them.

    .venv/bin/python benchmarks/peer_server.py --port 8101 --json-response
"""

from __future__ import annotations

import argparse
import gc
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import bench_catalog as catalog
import peers
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.prompts.base import Prompt
from mcp.server.mcpserver.resources import TextResource
from mcp.server.subscriptions import InMemorySubscriptionBus, PromptsListChanged
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse

#: session id -> the SDK's ServerSession (only with --broadcast-registry)
SESSIONS: dict[str, Any] = {}


def prompt_function(i: int) -> Callable[[str, str], Awaitable[str]]:
    """An async handler per prompt, as a user of the SDK writes one (its arguments are the prompt's)."""

    async def render(topic: str, audience: str) -> str:
        return catalog.prompt_text(i, topic, audience)

    render.__name__ = catalog.prompt_name(i)
    render.__doc__ = f"Briefing prompt number {i}"
    return render


def tool_function(i: int) -> Callable[[int, str], Awaitable[str]]:
    async def tool(a: int, b: str) -> str:
        return f"tool{i:02d}: {a} {b}"

    tool.__name__ = catalog.tool_name(i)
    tool.__doc__ = f"Synthetic tool number {i}"
    return tool


async def echo(text: str) -> str:
    """Echo the input text back."""
    return text


async def record_sessions(ctx: Any, call_next: Any) -> Any:
    """Middleware: note the ServerSession of each session when its notifications/initialized arrives."""
    if ctx.method == "notifications/initialized" and ctx.request is not None:
        sid = ctx.request.headers.get("mcp-session-id")
        if sid:
            SESSIONS[sid] = ctx.session
    return await call_next(ctx)


def build(args: argparse.Namespace) -> MCPServer:
    bus = InMemorySubscriptionBus()
    server = MCPServer(
        "peer",
        version="1.0",
        log_level=args.log_level,
        subscriptions=bus,
        middleware=[record_sessions] if args.broadcast_registry else None,
        warn_on_duplicate_prompts=False,
    )
    for i in range(catalog.N_PROMPTS):
        server.add_prompt(Prompt.from_function(prompt_function(i), name=catalog.prompt_name(i)))
    for i in range(catalog.N_RESOURCES):
        server.add_resource(
            TextResource(
                uri=catalog.resource_uri(i), name=f"r{i:04d}", mime_type="text/plain", text=catalog.resource_text(i)
            )
        )
    server.add_tool(echo, name="echo")
    for i in range(1, catalog.N_TOOLS):
        server.add_tool(tool_function(i), name=catalog.tool_name(i))
    if args.broadcast_registry:
        add_broadcast_routes(server, bus)
    return server


def add_broadcast_routes(server: MCPServer, bus: InMemorySubscriptionBus) -> None:
    async def live_sessions() -> dict[str, Any]:
        live = server.session_manager._server_instances  # the sessions the SDK has not dropped
        for sid in [s for s in SESSIONS if s not in live]:
            SESSIONS.pop(sid, None)
        return live

    @server.custom_route("/admin/broadcast", methods=["POST"])
    async def broadcast(request: Request) -> JSONResponse:
        await live_sessions()
        t0 = time.perf_counter()
        for session in list(SESSIONS.values()):
            await session.send_prompt_list_changed()
        return JSONResponse({"sessions": len(SESSIONS), "server_loop_s": time.perf_counter() - t0})

    @server.custom_route("/admin/publish", methods=["POST"])
    async def publish(request: Request) -> JSONResponse:
        t0 = time.perf_counter()
        await bus.publish(PromptsListChanged())
        return JSONResponse({"server_publish_s": time.perf_counter() - t0})

    @server.custom_route("/admin/count", methods=["GET"])
    async def count(request: Request) -> JSONResponse:
        live = await live_sessions()
        return JSONResponse({"registry": len(SESSIONS), "live": len(live)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8101)
    ap.add_argument("--json-response", action="store_true", help="answer POSTs with application/json, not SSE")
    ap.add_argument("--broadcast-registry", action="store_true", help="the /admin/* measuring hooks (fanout.py)")
    ap.add_argument("--gc-freeze", action="store_true", help="gc.freeze() after building the catalog")
    ap.add_argument("--no-dns-rebinding", action="store_true", help="pass TransportSecuritySettings(False)")
    ap.add_argument("--max-sessions", type=int, default=10_000)
    ap.add_argument("--log-level", default="WARNING")
    ap.add_argument("--loop", default="asyncio", help="uvicorn --loop (asyncio|uvloop); the SDK's default: asyncio")
    ap.add_argument("--http", default="h11", help="uvicorn --http (h11|httptools); the SDK's default: h11")
    args = ap.parse_args()

    server = build(args)
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False) if args.no_dns_rebinding else None
    app = server.streamable_http_app(
        json_response=args.json_response,
        transport_security=security,
        host=args.host,  # 127.0.0.1/localhost: the SDK turns its Host/Origin checks on
        max_sessions=args.max_sessions,
    )
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    peers.serve(app, args.host, args.port, args.loop, args.http, log_level=args.log_level.lower())


if __name__ == "__main__":
    main()
