"""How the benchmarks start the servers the registry is compared with: the SDK peer and the bare ceiling.

Both live in this directory and run on this repository's venv (``pip install -e '.[test]'`` brings
the official MCP SDK the peer is built on), so a clone is all a benchmark needs. One home for the
commands, so every script measures the same peer started the same way.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
PEER_SCRIPT = BENCH / "peer_server.py"
CEILING_SCRIPT = BENCH / "ceiling_server.py"


def require_sdk() -> None:
    """Stop early, saying how to fix it, when this venv cannot run the peer."""
    probe = [sys.executable, "-c", "import mcp.server.mcpserver, uvicorn"]
    if subprocess.run(probe, capture_output=True).returncode != 0:
        raise SystemExit("error: the peer needs the official MCP SDK in this venv: .venv/bin/pip install -e '.[test]'")


def peer_command(port: int, *options: str) -> list[str]:
    """The SDK's server on ``port`` (``peer_server.py``); ``options`` such as ``--json-response``."""
    return [sys.executable, str(PEER_SCRIPT), "--port", str(port), *options]


def serve(app: Any, host: str, port: int, loop: str, http: str, log_level: str = "warning") -> None:
    """Run a reference server's ``app`` as both are measured: one process, one worker, no access log,
    a backlog that takes a burst of connections and keep-alive longer than any pause between runs."""
    import uvicorn

    uvicorn.run(
        app,
        host=host,
        port=port,
        workers=1,
        log_level=log_level,
        access_log=False,
        loop=loop,
        http=http,
        timeout_keep_alive=30,
        backlog=4096,
    )


def ceiling_command(port: int) -> list[str]:
    """The bare ASGI app on the registry's own stack: uvloop and the registry's protocol class
    (uvicorn's httptools protocol with the head bound, ``registry.serving.HeadBoundProtocol``), so
    the ratio to it is what the registry's own work costs."""
    return [
        sys.executable,
        str(CEILING_SCRIPT),
        "--port",
        str(port),
        "--loop",
        "uvloop",
        "--http",
        "registry.serving:HeadBoundProtocol",
    ]
