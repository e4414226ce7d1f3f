"""Raw MCP on the wire for the interop tests: SSE parsing, a Streamable HTTP client, the article's walk.

Nothing here is a mock: these helpers only frame JSON-RPC the way a client would and read what
the real server answers.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.http import TLS

ACCEPT_BOTH = "application/json, text/event-stream"

# ------------------------------------------------------------------ the article, verbatim


def article_initialize(version: str) -> dict[str, Any]:
    """Step 1's request: the article's, with the protocol version under test."""
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {"roots": {"listChanged": True}, "sampling": {}},
            "clientInfo": {"name": "demo-client", "version": "1.0.0"},
        },
    }


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
CALL_ECHO = {
    "jsonrpc": "2.0",
    "id": 3,
    "method": "tools/call",
    "params": {"name": "echo", "arguments": {"message": "Hello from MCP client!"}},
}
CALL_ADD = {
    "jsonrpc": "2.0",
    "id": 4,
    "method": "tools/call",
    "params": {"name": "add", "arguments": {"a": 42, "b": 58}},
}
RESOURCES_LIST = {"jsonrpc": "2.0", "id": 5, "method": "resources/list", "params": {}}
RESOURCES_READ = {"jsonrpc": "2.0", "id": 6, "method": "resources/read", "params": {"uri": "info://server-info"}}
PROMPTS_LIST = {"jsonrpc": "2.0", "id": 7, "method": "prompts/list", "params": {}}
SUMMARIZE_TEXT = "MCP defines a standard protocol for connecting AI models to tools and data sources."
PROMPTS_GET = {
    "jsonrpc": "2.0",
    "id": 8,
    "method": "prompts/get",
    "params": {"name": "summarize", "arguments": {"text": SUMMARIZE_TEXT, "max_words": "20"}},
}

#: The article's tools/list entries (the registry adds annotations; these keys must match exactly).
ARTICLE_TOOLS = {
    "echo": {
        "name": "echo",
        "description": "Repeats the input message back. Useful for testing connectivity.",
        "inputSchema": {
            "type": "object",
            "properties": {"message": {"type": "string", "description": "The message to echo back"}},
            "required": ["message"],
        },
    },
    "add": {
        "name": "add",
        "description": "Adds two numbers and returns the result.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "a": {"type": "number", "description": "First number"},
                "b": {"type": "number", "description": "Second number"},
            },
            "required": ["a", "b"],
        },
    },
}
ARTICLE_SUMMARIZE_LISTING = {
    "name": "summarize",
    "description": "Summarize a piece of text concisely",
    "arguments": [
        {"name": "text", "description": "The text to summarize", "required": True},
        {"name": "max_words", "description": "Maximum words in the summary", "required": False},
    ],
}
SUMMARIZE_RENDERED = f"Summarize the following text in at most 20 words:\n\n{SUMMARIZE_TEXT}"

#: ``rpc(message)`` sends one JSON-RPC message and returns the response (None for a notification).
Rpc = Callable[[dict[str, Any]], dict[str, Any] | None]


def run_article_walk(rpc: Rpc, version: str) -> None:
    """The article's eight steps; every answer is checked against the article's text."""
    # Step 1: initialize + notifications/initialized
    init = rpc(article_initialize(version))
    assert init is not None
    assert init["jsonrpc"] == "2.0" and init["id"] == 1, init
    result = init["result"]
    assert result["protocolVersion"] == version
    assert result["serverInfo"]["name"] == "mcp-registry"
    assert isinstance(result["serverInfo"]["version"], str)
    for capability in ("prompts", "resources", "tools"):
        assert isinstance(result["capabilities"][capability], dict), result["capabilities"]
    assert rpc(INITIALIZED) is None

    # Step 2: tools/list
    tools = rpc(TOOLS_LIST)
    assert tools is not None and tools["id"] == 2 and "error" not in tools, tools
    listed = {tool["name"]: tool for tool in tools["result"]["tools"]}
    assert sorted(listed) == ["add", "echo"]
    for name, expected in ARTICLE_TOOLS.items():
        assert {key: listed[name][key] for key in expected} == expected
    assert "nextCursor" not in tools["result"]

    # Steps 3-4: tools/call echo, add (the article's full responses)
    assert rpc(CALL_ECHO) == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"content": [{"type": "text", "text": "Echo: Hello from MCP client!"}], "isError": False},
    }
    assert rpc(CALL_ADD) == {
        "jsonrpc": "2.0",
        "id": 4,
        "result": {"content": [{"type": "text", "text": "42 + 58 = 100"}], "isError": False},
    }

    # Steps 5-6: resources/list + resources/read
    resources = rpc(RESOURCES_LIST)
    assert resources is not None and resources["id"] == 5, resources
    by_uri = {item["uri"]: item for item in resources["result"]["resources"] if "uri" in item}
    server_info = by_uri["info://server-info"]
    assert server_info["description"] == "Metadata about this MCP server: name, version, capabilities"
    assert server_info["mimeType"] == "application/json"
    # The article's listing shows the display name "Server Information"; the registry keeps the
    # programmatic name in `name` and the display name in `title`.
    assert server_info["name"] == "server-info"
    assert server_info["title"] == "Server Information"
    read = rpc(RESOURCES_READ)
    assert read is not None and read["id"] == 6, read
    (content,) = read["result"]["contents"]
    assert content["uri"] == "info://server-info"
    assert content["mimeType"] == "application/json"
    info = json.loads(content["text"])
    assert info["name"] == "mcp-registry"
    assert info["capabilities"] == ["tools", "resources", "prompts"]

    # Steps 7-8: prompts/list + prompts/get
    prompts = rpc(PROMPTS_LIST)
    assert prompts is not None and prompts["id"] == 7, prompts
    prompt_by_name = {p["name"]: p for p in prompts["result"]["prompts"]}
    assert prompt_by_name["summarize"] == ARTICLE_SUMMARIZE_LISTING
    rendered = rpc(PROMPTS_GET)
    assert rendered is not None and rendered["id"] == 8, rendered
    assert rendered["result"]["messages"] == [{"role": "user", "content": {"type": "text", "text": SUMMARIZE_RENDERED}}]
    assert rendered["result"]["description"] == "Summarize a piece of text concisely"


# ------------------------------------------------------------------ Server-Sent Events


@dataclass
class SseEvent:
    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None

    def json(self) -> Any:
        return json.loads(self.data)


def iter_sse(lines: Iterator[str]) -> Iterator[SseEvent]:
    """Events from an SSE line stream (comments skipped; an event ends at a blank line)."""
    event = SseEvent()
    data: list[str] = []
    seen = False
    for line in lines:
        if line == "":
            if seen:
                event.data = "\n".join(data)
                yield event
            event, data, seen = SseEvent(), [], False
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        seen = True
        if name == "event":
            event.event = value
        elif name == "data":
            data.append(value)
        elif name == "id":
            event.id = value
        elif name == "retry" and value.isdigit():
            event.retry = int(value)


def parse_sse_body(text: str) -> list[SseEvent]:
    return list(iter_sse(iter([*text.splitlines(), ""])))


def response_messages(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages in a Streamable HTTP answer, JSON or SSE."""
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        return [e.json() for e in parse_sse_body(response.text) if e.event == "message" and e.data]
    payload = response.json()
    return payload if isinstance(payload, list) else [payload]


# ------------------------------------------------------------------ Streamable HTTP


@dataclass
class StreamableHttpClient:
    """A minimal Streamable HTTP client: keeps Mcp-Session-Id and MCP-Protocol-Version."""

    http: httpx.Client
    path: str = "/mcp"
    session_id: str | None = None
    protocol_version: str | None = None
    #: Send MCP-Protocol-Version after initialize (clients of 2025-06-18+ must).
    send_version_header: bool = True
    extra_headers: dict[str, str] = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        headers = {"Accept": ACCEPT_BOTH, "Content-Type": "application/json", **self.extra_headers}
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.protocol_version and self.send_version_header:
            headers["MCP-Protocol-Version"] = self.protocol_version
        return headers

    def post(self, message: Any, **headers: str) -> httpx.Response:
        return self.http.post(self.path, content=json.dumps(message), headers={**self.headers(), **headers})

    def initialize(self, version: str = "2025-11-25", **params: Any) -> dict[str, Any]:
        message = article_initialize(version)
        message["params"].update(params)
        response = self.post(message)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert "result" in answer, answer
        self.session_id = response.headers["mcp-session-id"]
        self.protocol_version = answer["result"]["protocolVersion"]
        notified = self.post(INITIALIZED)
        assert notified.status_code == 202, notified.text
        return answer

    def rpc(self, message: dict[str, Any]) -> dict[str, Any] | None:
        response = self.post(message)
        if "id" not in message:
            assert response.status_code == 202, response.text
            assert response.content == b""
            return None
        assert response.status_code == 200, response.text
        answers = [m for m in response_messages(response) if m.get("id") == message["id"]]
        assert len(answers) == 1, response.text
        if message.get("method") == "initialize" and "result" in answers[0]:
            self.session_id = response.headers["mcp-session-id"]
            self.protocol_version = answers[0]["result"]["protocolVersion"]
        return answers[0]

    def request(self, method: str, params: dict[str, Any] | None = None, request_id: int = 99) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        answer = self.rpc(message)
        assert answer is not None
        return answer


def open_session(base_url: str, token: str | None = None) -> StreamableHttpClient:
    """An initialized Streamable HTTP session on ``base_url`` (anonymous, or with ``token``)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    client = StreamableHttpClient(httpx.Client(base_url=base_url, timeout=30, verify=TLS), extra_headers=headers)
    client.initialize()
    return client


def list_all(client: StreamableHttpClient, method: str, key: str) -> list[dict[str, Any]]:
    """Every item a ``*/list`` method serves (``method`` answers them under ``key``), following
    ``nextCursor`` through every page: a shared test server may hold more than one page."""
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {}
    while True:
        result = client.request(method, params)["result"]
        items.extend(result[key])
        if not result.get("nextCursor"):
            return items
        params = {"cursor": result["nextCursor"]}


def served_prompt_text(base_url: str, name: str, arguments: dict[str, str], token: str | None = None) -> str:
    """What ``prompts/get`` serves a new session now, as the first message's text."""
    client = open_session(base_url, token)
    try:
        answer = client.request("prompts/get", {"name": name, "arguments": arguments})
    finally:
        client.http.close()
    assert "result" in answer, answer
    text: str = answer["result"]["messages"][0]["content"]["text"]
    return text


# ------------------------------------------------------------------ stdio

#: What tests/conftest.py's settings use, so a child process reads the same sealed secrets.
SECRET_KEY = "test-secret-key"


def mcp_registry_command() -> list[str]:
    """The ``mcp-registry`` console script of this environment (or ``python -m registry``)."""
    script = Path(sys.executable).with_name("mcp-registry")
    if script.exists():
        return [str(script)]
    found = shutil.which("mcp-registry")
    return [found] if found else [sys.executable, "-m", "registry"]


def child_env() -> dict[str, str]:
    """This environment without REGISTRY_* settings (the command line says what the child uses)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    env["REGISTRY_SECRET_KEY"] = SECRET_KEY
    return env


class StdioProcess:
    """A child process speaking line-delimited JSON-RPC; stdout lines are read by a thread."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stderr = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._err_reader = threading.Thread(target=self._read_err, daemon=True)
        self._err_reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def send(self, message: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float = 30.0) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer on stdout within {timeout}s; stderr: {self.stderr!r}") from None
        assert line is not None, f"the process closed stdout; stderr: {self.stderr!r}"
        message: dict[str, Any] = json.loads(line)  # stdout carries only JSON-RPC, one message a line
        return message

    def rpc(self, message: dict[str, Any]) -> dict[str, Any] | None:
        self.send(message)
        if "id" not in message:
            return None
        answer = self.receive()
        assert answer.get("id") == message["id"], answer
        return answer

    def close(self) -> int:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise
