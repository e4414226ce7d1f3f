"""The official TypeScript SDK 2.x client (``@modelcontextprotocol/client``) against the registry.

``tests/interop/ts-client/ts_client_walk.mjs`` (the client is pinned in that folder's
package.json) connects pinned to 2026-07-28 (``versionNegotiation: {mode: {pin}}``), in ``auto``
mode or in ``legacy`` mode, walks the seed catalog, then waits for a prompts list change: on a
2026-07-28 connection the client opens ``subscriptions/listen`` by itself for its ``listChanged``
handlers, on a legacy one it uses the session's GET stream. The test makes an admin edit once the
walk is done and checks that the change arrived. Node comes from ``bash
tests/interop/setup_node_tools.sh``, the client from ``npm ci`` in tests/interop/ts-client;
without them this skips (fails in CI).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from registry.catalog.values import WriteOptions
from registry.runtime import Registry
from tests.conftest import LiveServer
from tests.interop.mcp_wire import child_env, mcp_registry_command

pytestmark = pytest.mark.interop

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE = REPO_ROOT / ".tools" / "node-venv" / "bin" / "node"
NODE_DIR = REPO_ROOT / "tests" / "interop" / "ts-client"
CLIENT_PACKAGE = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "client"
CLIENT_VERSION = "2.4.0"
SCRIPT = NODE_DIR / "ts_client_walk.mjs"
MODERN = "2026-07-28"


@pytest.fixture
def node() -> Path:
    reason = None
    if not NODE.exists():
        reason = f"no Node at {NODE}"
    elif not (CLIENT_PACKAGE / "package.json").exists():
        reason = f"{CLIENT_PACKAGE} is not installed"
    if reason is not None:
        message = f"TypeScript SDK client not available: {reason}; run `bash tests/interop/setup_node_tools.sh`"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI is set, so this fails instead of skipping)")
        pytest.skip(message)
    version = json.loads((CLIENT_PACKAGE / "package.json").read_text(encoding="utf-8"))["version"]
    assert version == CLIENT_VERSION, f"installed client is {version}, the test expects {CLIENT_VERSION}"
    return NODE


class Walk:
    """The script as a child process; its stdout lines, parsed, arrive on a queue."""

    def __init__(self, node: Path, *args: str) -> None:
        env = child_env()
        env["PATH"] = f"{node.parent}{os.pathsep}{env.get('PATH', '')}"
        self.proc = subprocess.Popen(
            [str(node), str(SCRIPT), *args],
            cwd=NODE_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def next(self, timeout: float = 60) -> dict[str, Any]:
        try:
            item = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output from the TypeScript client within {timeout}s") from None
        assert item is not None, f"the client exited; stderr: {self.stderr()}"
        assert item["step"] != "error", item["message"]
        return item

    def stderr(self) -> str:
        self.proc.kill()
        assert self.proc.stderr is not None
        return self.proc.stderr.read()[-4000:]

    def finish(self) -> int:
        try:
            return self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def check_walk(walk: dict[str, Any], protocol_version: str) -> None:
    assert walk["protocolVersion"] == protocol_version
    assert walk["serverName"] == "mcp-registry"
    assert walk["tools"] == ["add", "echo"]
    assert walk["echo"] == "Echo: Hello from MCP client!"
    assert walk["add"] == "42 + 58 = 100"
    assert "info://server-info" in walk["resources"]
    assert (walk["readUri"], walk["readMimeType"]) == ("info://server-info", "application/json")
    assert walk["templates"] == ["sprint://{team}/current"]
    assert {"bug-analysis-report", "code-review", "incident-postmortem", "summarize"} <= set(walk["prompts"])
    assert walk["rendered"] == "Summarize the following text in at most 20 words:\n\nShort text."


def run_walk(node: Path, demo: Registry, name: str, expected_version: str, *args: str) -> None:
    walk = Walk(node, *args)
    try:
        check_walk(walk.next(), expected_version)
        assert walk.next()["step"] == "ready"
        demo.catalog.create(
            "prompt", {"name": name, "template": "Heard by the TypeScript client"}, WriteOptions(actor="admin")
        )
        changed = walk.next(timeout=30)
        assert changed["step"] == "changed" and changed["prompts"] is not None, changed
        assert name in changed["prompts"]
        assert walk.finish() == 0
    finally:
        if walk.proc.poll() is None:
            walk.proc.kill()


@pytest.mark.parametrize(("mode", "expected"), [(MODERN, MODERN), ("auto", MODERN), ("legacy", "2025-11-25")])
def test_ts_client_over_http(node: Path, demo: Registry, server: LiveServer, mode: str, expected: str) -> None:
    run_walk(node, demo, f"ts-http-{mode.replace('-', '')}", expected, mode, "http", f"{server.url}/mcp")


@pytest.mark.parametrize(("mode", "expected"), [(MODERN, MODERN), ("legacy", "2025-11-25")])
def test_ts_client_over_stdio(
    node: Path, demo: Registry, database_url: str, tmp_path: Path, mode: str, expected: str
) -> None:
    command = [*mcp_registry_command(), "stdio", "--database-url", database_url, "--data-dir", str(tmp_path / "s")]
    run_walk(node, demo, f"ts-stdio-{mode.replace('-', '')}", expected, mode, "stdio", *command)
