"""The MCP Inspector's CLI mode (``@modelcontextprotocol/inspector``, pinned in tests/interop/node) as the client.

The same command a person runs by hand, e.g.::

    npx @modelcontextprotocol/inspector --cli http://127.0.0.1:8080/mcp --transport http --method tools/list

run here as ``node <inspector launcher> --cli ...`` with the Node from ``.tools/node-venv`` (the
Inspector needs Node >= 22.19). ``bash tests/interop/setup_node_tools.sh`` installs both; without
them this test skips, except under CI (``CI`` set), where it fails.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from registry.config import Settings
from registry.runtime import Registry
from tests.conftest import LiveServer
from tests.interop.mcp_wire import (
    ARTICLE_SUMMARIZE_LISTING,
    ARTICLE_TOOLS,
    SECRET_KEY,
    SUMMARIZE_RENDERED,
    SUMMARIZE_TEXT,
    child_env,
    mcp_registry_command,
)

pytestmark = pytest.mark.interop

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE = REPO_ROOT / ".tools" / "node-venv" / "bin" / "node"
INSPECTOR_PACKAGE = REPO_ROOT / "tests" / "interop" / "node" / "node_modules" / "@modelcontextprotocol" / "inspector"
INSPECTOR_VERSION = "2.12.0"
SETUP_HINT = "run `bash tests/interop/setup_node_tools.sh` to install them"


def _unavailable(reason: str) -> None:
    message = f"MCP Inspector not available: {reason}; {SETUP_HINT}"
    if os.environ.get("CI"):
        pytest.fail(message + " (CI is set, so this fails instead of skipping)")
    pytest.skip(message)


@dataclasses.dataclass
class Inspector:
    node: Path
    launcher: Path
    home: Path

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = child_env()  # no REGISTRY_* settings; REGISTRY_SECRET_KEY for a stdio child
        # Keep the Inspector's catalog and storage (~/.mcp-inspector) inside the test's folder.
        env["HOME"] = str(self.home)
        env["PATH"] = f"{self.node.parent}{os.pathsep}{env.get('PATH', '')}"
        run = subprocess.run(
            [str(self.node), str(self.launcher), "--cli", *args], env=env, capture_output=True, text=True, timeout=120
        )
        if check:
            assert run.returncode == 0, f"inspector exited {run.returncode}\nstdout: {run.stdout}\nstderr: {run.stderr}"
        return run

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args).stdout)


@pytest.fixture
def inspector(tmp_path: Path) -> Inspector:
    if not NODE.exists():
        _unavailable(f"no Node at {NODE}")
    manifest = INSPECTOR_PACKAGE / "package.json"
    if not manifest.exists():
        _unavailable(f"{INSPECTOR_PACKAGE} is not installed")
    package = json.loads(manifest.read_text(encoding="utf-8"))
    assert package["version"] == INSPECTOR_VERSION, (
        f"installed Inspector is {package['version']}, the test expects {INSPECTOR_VERSION}; {SETUP_HINT}"
    )
    home = tmp_path / "home"
    home.mkdir()
    return Inspector(NODE, INSPECTOR_PACKAGE / package["bin"]["mcp-inspector"], home)


def check_article_answers(call: Any) -> None:
    """The article's steps 2-8 through the Inspector CLI (``call(*args)`` returns its parsed JSON output)."""
    tools = {tool["name"]: tool for tool in call("--method", "tools/list")["tools"]}
    assert sorted(tools) == ["add", "echo"]
    for name, expected in ARTICLE_TOOLS.items():
        assert {key: tools[name][key] for key in expected} == expected
    assert call("--method", "tools/call", "--tool-name", "echo", "--tool-arg", "message=Hello from MCP client!") == {
        "content": [{"type": "text", "text": "Echo: Hello from MCP client!"}],
        "isError": False,
    }
    assert call("--method", "tools/call", "--tool-name", "add", "--tool-arg", "a=42", "b=58") == {
        "content": [{"type": "text", "text": "42 + 58 = 100"}],
        "isError": False,
    }
    resources = {r["uri"]: r for r in call("--method", "resources/list")["resources"]}
    assert resources["info://server-info"]["title"] == "Server Information"
    read = call("--method", "resources/read", "--uri", "info://server-info")
    assert read["contents"][0]["uri"] == "info://server-info"
    assert json.loads(read["contents"][0]["text"])["name"] == "mcp-registry"
    prompts = {p["name"]: p for p in call("--method", "prompts/list")["prompts"]}
    assert prompts["summarize"] == ARTICLE_SUMMARIZE_LISTING
    rendered = call(
        "--method",
        "prompts/get",
        "--prompt-name",
        "summarize",
        "--prompt-args",
        f"text={SUMMARIZE_TEXT}",
        "max_words=20",
    )
    assert rendered["messages"] == [{"role": "user", "content": {"type": "text", "text": SUMMARIZE_RENDERED}}]


def test_inspector_cli_streamable_http(inspector: Inspector, server: LiveServer) -> None:
    url = f"{server.url}/mcp"
    check_article_answers(lambda *args: inspector.json(url, "--transport", "http", *args))


def test_inspector_cli_legacy_sse(inspector: Inspector, server: LiveServer) -> None:
    url = f"{server.url}/sse"
    check_article_answers(lambda *args: inspector.json(url, "--transport", "sse", *args))


def test_inspector_cli_stdio(inspector: Inspector, demo: Registry, database_url: str, tmp_path: Path) -> None:
    """The Inspector starts ``mcp-registry stdio`` itself for each call (a few seconds each: two calls only).
    It passes its child no environment of ours, so the child's data folder holds the key every process
    writing to this database shares (the audit chain refuses a writer with another)."""
    data_dir = tmp_path / "stdio"
    data_dir.mkdir()
    (data_dir / "secret.key").write_text(SECRET_KEY + "\n")
    command = [*mcp_registry_command(), "stdio", "--database-url", database_url, "--data-dir", str(data_dir)]
    assert inspector.json(*command, "--method", "tools/call", "--tool-name", "add", "--tool-arg", "a=42", "b=58") == {
        "content": [{"type": "text", "text": "42 + 58 = 100"}],
        "isError": False,
    }
    rendered = inspector.json(
        *command,
        "--method",
        "prompts/get",
        "--prompt-name",
        "summarize",
        "--prompt-args",
        f"text={SUMMARIZE_TEXT}",
        "max_words=20",
    )
    assert rendered["messages"] == [{"role": "user", "content": {"type": "text", "text": SUMMARIZE_RENDERED}}]


@pytest.fixture
def locked_server(demo: Registry, settings: Settings) -> Iterator[LiveServer]:
    registry = Registry(dataclasses.replace(settings, anonymous_agents=False))
    registry.prepare()
    server = LiveServer(registry)
    server.start()
    yield server
    server.stop()
    registry.close()


def test_inspector_cli_with_a_bearer_token(inspector: Inspector, demo: Registry, locked_server: LiveServer) -> None:
    token, _ = demo.tokens.create("inspector", ["agent"])
    url = f"{locked_server.url}/mcp"
    refused = inspector.run(url, "--transport", "http", "--method", "tools/list", check=False)
    assert refused.returncode != 0
    # The Inspector reads the 401 + WWW-Authenticate: Bearer as "authorization needed" (it would start OAuth).
    assert '"auth_required"' in refused.stdout + refused.stderr, refused
    tools = inspector.json(
        url, "--transport", "http", "--header", f"Authorization: Bearer {token}", "--method", "tools/list"
    )
    assert sorted(t["name"] for t in tools["tools"]) == ["add", "echo"]
