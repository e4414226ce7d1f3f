"""A large catalog served correctly while admins write: the behaviour behind benchmarks/scale.py.

2,000 prompts imported with ``mcp-registry import``, a server started on that database, agents
reading every prompt over MCP while one prompt is edited ten times through the admin API and 200
more prompts are imported through the CLI into the running server. Asserted: every answer is the
right text, nothing fails, no agent waits a second for an answer (a stall), an agent never goes
back to an older edit once it has seen a newer one, the last edit is served, and the imported
prompts are listed and served. Timings are the benchmark's business (benchmarks/scale.py); here
only generous bounds keep the test from hanging or catch a stall.
"""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient, response_messages
from tests.serve_process import ServerProcess, mcp_registry_command
from tests.waiting import wait_until

ENTRIES = 2000
LIVE_ENTRIES = 200
EDITS = 10
AGENTS = 3
TARGET = "p001000"
#: Generous bounds: the box is shared, and this test asserts behaviour, not speed (the issue's targets
#: are the benchmark's). STALL_S is the suite's bound for "the event loop was blocked" (the
#: responsiveness probe's in tests/security/conftest.py): a snapshot rebuilt from scratch on every
#: change (the code before issue 8) made agents wait 2.9 s here on PostgreSQL.
STALL_S = 2.0
SERVED_WITHIN_S = 20.0
CLI_TIMEOUT_S = 180.0
SECRET_KEY = "test-scale-secret-key"


def _name(prefix: str, i: int) -> str:
    return f"{prefix}{i:06d}"


def _template(name: str, marker: str = "") -> str:
    return f"[{name}]{marker} Write a short note about {{{{ topic }}}} for the team."


def _expected(name: str, marker: str = "") -> str:
    return f"[{name}]{marker} Write a short note about scale for the team."


def _write_bundle(folder: Path, prefix: str, count: int) -> Path:
    prompts = folder / "prompts"
    prompts.mkdir(parents=True)
    for i in range(count):
        name = _name(prefix, i)
        (prompts / f"{name}.yaml").write_text(
            f"name: {name}\ntitle: Prompt {i}\ndescription: Scale test prompt {i}\ntags: [scale]\n"
            "arguments:\n- name: topic\n  description: What to write about\n  required: true\n"
            f'template: "{_template(name)}"\n',
            encoding="utf-8",
        )
    return folder


def _cli(*args: str, database_url: str, folder: Path) -> str:
    """``mcp-registry ARGS`` as its own process against ``database_url``, run in ``folder``; its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    env["REGISTRY_SECRET_KEY"] = SECRET_KEY
    done = subprocess.run(
        [*mcp_registry_command(), *args, "--database-url", database_url],
        env=env,
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )
    assert done.returncode == 0, f"mcp-registry {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def _client(url: str) -> StreamableHttpClient:
    client = StreamableHttpClient(httpx.Client(base_url=url, timeout=30, verify=TLS))
    client.initialize()
    return client


def _text(client: StreamableHttpClient, name: str) -> str | None:
    """What prompts/get answers for ``name`` (None: an error, e.g. not served yet)."""
    response = client.post(
        {"jsonrpc": "2.0", "id": 1, "method": "prompts/get", "params": {"name": name, "arguments": {"topic": "scale"}}}
    )
    assert response.status_code == 200, response.text
    (answer,) = [m for m in response_messages(response) if m.get("id") == 1]
    if "result" not in answer:
        return None
    return str(answer["result"]["messages"][0]["content"]["text"])


def _listing(client: StreamableHttpClient) -> list[dict[str, Any]]:
    prompts: list[dict[str, Any]] = []
    params: dict[str, Any] = {}
    for _ in range(10_000):
        result = client.request("prompts/list", params)["result"]
        prompts += result["prompts"]
        if "nextCursor" not in result:
            return prompts
        params = {"cursor": result["nextCursor"]}
    raise AssertionError("prompts/list never ended")


def _wait_for(client: StreamableHttpClient, name: str, text: str) -> None:
    last: list[str | None] = [None]

    def served() -> bool:
        last[0] = _text(client, name)
        return last[0] == text

    wait_until(served, lambda: f"{name} served as {text!r} (last answer: {last[0]!r})", timeout=SERVED_WITHIN_S)


class Agent(threading.Thread):
    """prompts/get of random prompts in a loop, each answer checked against what it must be."""

    def __init__(self, url: str, names: list[str], seed: int) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.names = names
        self.random = random.Random(seed)
        self.stop = threading.Event()
        self.requests = 0
        self.slowest = 0.0
        self.failures: list[str] = []
        self.edits_seen: list[int] = []  # the target's edit number, in the order this agent saw them

    def run(self) -> None:
        try:
            client = _client(self.url)
        except Exception as exc:
            self.failures.append(f"initialize: {exc!r}")
            return
        try:
            while not self.stop.is_set() and len(self.failures) < 20:
                name = TARGET if self.requests % 4 == 0 else self.random.choice(self.names)
                started = time.perf_counter()
                try:
                    text = _text(client, name)
                except Exception as exc:
                    self.failures.append(f"{name}: {exc!r}")
                    continue
                self.slowest = max(self.slowest, time.perf_counter() - started)
                self.requests += 1
                if name == TARGET and text is not None and text != _expected(TARGET):
                    marker = text.removeprefix(f"[{TARGET}] edit ").split(" ", 1)[0]
                    if marker.isdigit() and text == _expected(TARGET, f" edit {marker}"):
                        self.edits_seen.append(int(marker))
                        continue
                if text != _expected(name):
                    self.failures.append(f"{name}: {text!r}")
        finally:
            client.http.close()


def test_large_catalog_served_correctly_while_admins_write(database_url: str, tmp_path: Path) -> None:
    names = [_name("p", i) for i in range(ENTRIES)]
    _cli("db", "upgrade", database_url=database_url, folder=tmp_path)
    out = _cli(
        "import", str(_write_bundle(tmp_path / "bundle", "p", ENTRIES)), database_url=database_url, folder=tmp_path
    )
    assert f"changed {ENTRIES} of {ENTRIES}" in out, out[-500:]

    with ServerProcess(tmp_path / "data", database_url=database_url, env={"REGISTRY_SECRET_KEY": SECRET_KEY}) as server:
        reader = _client(server.url)
        listed = _listing(reader)
        assert sorted(p["name"] for p in listed) == names  # every prompt, each once
        for prompt in listed:
            i = int(prompt["name"][1:])
            assert prompt["title"] == f"Prompt {i}" and prompt["description"] == f"Scale test prompt {i}", prompt
            assert prompt["arguments"] == [{"name": "topic", "description": "What to write about", "required": True}]

        agents = [Agent(server.url, names, seed) for seed in range(AGENTS)]
        for agent in agents:
            agent.start()
        try:
            # Ten edits of one prompt, 100 ms apart, while the agents read.
            with server.admin() as admin:
                for k in range(EDITS):
                    body = {
                        "title": "Prompt 1000",
                        "description": "Scale test prompt 1000",
                        "tags": ["scale"],
                        "arguments": [{"name": "topic", "description": "What to write about", "required": True}],
                        "template": _template(TARGET, f" edit {k}"),
                        "change_note": f"edit {k}",
                    }
                    answer = admin.put(f"/api/v1/prompts/{TARGET}", json=body)
                    assert answer.status_code == 200, answer.text
                    time.sleep(0.1)
            _wait_for(reader, TARGET, _expected(TARGET, f" edit {EDITS - 1}"))

            # 200 more prompts, imported through the CLI into the database the server runs on.
            live = [_name("q", i) for i in range(LIVE_ENTRIES)]
            out = _cli(
                "import",
                str(_write_bundle(tmp_path / "live", "q", LIVE_ENTRIES)),
                database_url=database_url,
                folder=tmp_path,
            )
            assert f"changed {LIVE_ENTRIES} of {LIVE_ENTRIES}" in out, out[-500:]
            _wait_for(reader, live[-1], _expected(live[-1]))
        finally:
            for agent in agents:
                agent.stop.set()
            for agent in agents:
                agent.join(timeout=30)

        for agent in agents:
            assert not agent.failures, f"agent answers that were wrong or failed: {agent.failures[:5]}"
            assert agent.requests >= 20, f"an agent made only {agent.requests} requests"
            assert agent.slowest <= STALL_S, (
                f"an agent waited {agent.slowest * 1000:.0f} ms for one prompts/get: a stall "
                f"(bound {STALL_S * 1000:.0f} ms)"
            )
            assert agent.edits_seen == sorted(agent.edits_seen), (
                f"an agent went back to older edits: {agent.edits_seen}"
            )

        # Everything is listed and served after the edits and the live import.
        assert sorted(p["name"] for p in _listing(reader)) == names + live
        for name in names + live:
            expected = _expected(TARGET, f" edit {EDITS - 1}") if name == TARGET else _expected(name)
            assert _text(reader, name) == expected, name
        reader.http.close()
