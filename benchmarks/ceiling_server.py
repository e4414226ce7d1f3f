#!/usr/bin/env python3
"""The bare ceiling: a raw ASGI app that answers every JSON-RPC POST with a canned result.

Its only work per request is ``json.loads`` of the body (to echo the ``id``); the result is the one
the peer gives for that method, byte for byte the same size (``bench_catalog.CEILING_RESULTS``).
``initialize`` gets an ``Mcp-Session-Id`` so the load generator's handshake works; notifications get
202. Run on the registry's own stack (``--loop uvloop --http registry.serving:HeadBoundProtocol``,
as ``mcp_throughput.py`` does), it is what Python HTTP does here with no work at all: the registry's
requests/s divided by it is what the registry's own work costs.

    .venv/bin/python benchmarks/ceiling_server.py --port 8102 --loop uvloop --http httptools
"""

from __future__ import annotations

import argparse
import json
import uuid
from typing import Any

import bench_catalog as catalog
import peers

PARSE_ERROR = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}'


def answer(method: str, body: bytes) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """(status, body, extra headers) for one request."""
    if method != "POST":
        return 405, b"", []
    try:
        message = json.loads(body)
    except ValueError:
        return 400, PARSE_ERROR, []
    if "id" not in message:
        return 202, b"", []
    rpc = message.get("method")
    extra = [(b"mcp-session-id", uuid.uuid4().hex.encode())] if rpc == "initialize" else []
    result = catalog.CEILING_RESULTS.get(rpc, b"{}")
    return 200, b'{"jsonrpc":"2.0","id":' + json.dumps(message["id"]).encode() + b',"result":' + result + b"}", extra


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    while True:
        event = await receive()
        body += event.get("body", b"")
        if not event.get("more_body"):
            break
    status, payload, extra = answer(scope["method"], body)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8102)
    ap.add_argument("--loop", default="asyncio")
    ap.add_argument("--http", default="h11")
    args = ap.parse_args()
    peers.serve(app, args.host, args.port, args.loop, args.http)


if __name__ == "__main__":
    main()
