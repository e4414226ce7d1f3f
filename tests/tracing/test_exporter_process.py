"""The exporter process and the pipe to it: a real ``mcp-registry serve`` exports through its own
child process; the queue is bounded (drops counted, logged once); a dead exporter process costs
the server nothing but its spans; at stop, what was queued is exported."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from registry.tracing.pipe import PipeOutlet
from registry.tracing.records import SERVER
from tests.factories import prompt_body
from tests.interop.mcp_wire import ACCEPT_BOTH, INITIALIZED, TOOLS_LIST, article_initialize
from tests.serve_process import ServerProcess, mcp_registry_command
from tests.tracing.otlp_receiver import OtlpReceiver
from tests.waiting import wait_until


def record(name: str = "prompts/get greet") -> list[object]:
    trace_id, span_id = os.urandom(16).hex(), os.urandom(8).hex()
    attributes = {"mcp.method.name": "x"}
    return [name, SERVER, trace_id, span_id, None, True, None, 1, 2, 0, None, attributes, None, None, None, False]


def test_the_queue_is_bounded_and_drops_are_counted_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    outlet = PipeOutlet([sys.executable, "-c", "pass"], queue_size=3)  # not started: nothing drains it
    with caplog.at_level(logging.WARNING, logger="registry.tracing"):
        for _ in range(10):
            outlet.put(record())
    assert outlet.dropped == 7
    assert [r.getMessage() for r in caplog.records if "OTEL_BSP_MAX_QUEUE_SIZE" in r.getMessage()] != []
    assert len(caplog.records) == 1


def test_a_dead_exporter_process_is_noticed_and_records_are_then_dropped(caplog: pytest.LogCaptureFixture) -> None:
    outlet = PipeOutlet([sys.executable, "-c", "import sys; sys.exit(3)"], queue_size=100)
    with caplog.at_level(logging.ERROR, logger="registry.tracing"):
        outlet.start()
        wait_until(lambda: outlet.dead, "the writer thread to notice the exporter process exited")
        for _ in range(5):
            outlet.put(record())  # never blocks: counted and dropped
        assert outlet.dropped >= 5
        outlet.close(timeout_s=10)
    assert any("exited" in r.getMessage() for r in caplog.records)


def test_records_queued_at_close_reach_the_exporter_process(tmp_path: Path) -> None:
    """close() ships what is queued, closes the pipe and waits for the child to export it."""
    with OtlpReceiver() as receiver:
        env = {
            **os.environ,
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "60000",  # only the shutdown flush exports
        }
        outlet = PipeOutlet([sys.executable, "-m", "registry.tracing.exporter"], queue_size=100, env=env)
        outlet.start()
        for index in range(20):
            outlet.put(record(f"span-{index}"))
        outlet.close(timeout_s=60)
        assert outlet.shipped == 20 and outlet.dropped == 0
        assert {f"span-{i}" for i in range(20)} <= {span.name for span in receiver.spans}


def _exporter_pid(server_pid: int) -> int:
    children = Path(f"/proc/{server_pid}/task/{server_pid}/children").read_text().split()
    assert len(children) == 1, children
    command = Path(f"/proc/{children[0]}/cmdline").read_bytes().split(b"\0")
    assert b"registry.tracing.exporter" in command, command
    return int(children[0])


def _prompts_get(server: ServerProcess, name: str, request_id: int) -> None:
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "prompts/get",
        "params": {
            "name": name,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        "Accept": ACCEPT_BOTH,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "prompts/get",
        "Mcp-Name": name,
    }
    with server.client() as http:
        answer = http.post("/mcp", content=json.dumps(message), headers=headers)
    assert answer.status_code == 200, answer.text
    assert "result" in answer.json(), answer.text


def test_serve_exports_through_its_own_exporter_process_and_keeps_serving_when_it_dies(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        server = ServerProcess(
            tmp_path / "data",
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"},
        )
        with server:
            with server.admin() as admin:
                assert admin.post("/api/v1/prompts", json=prompt_body("greet")).status_code == 201
            exporter = _exporter_pid(server.pid)
            _prompts_get(server, "greet", 1)
            span = receiver.wait_for_span("prompts/get greet")
            assert span.attributes["mcp.method.name"] == "prompts/get"

            os.kill(exporter, signal.SIGKILL)
            wait_until(
                lambda: "span records are dropped from now on" in server.log_path.read_text(errors="replace"),
                "the server to log that its exporter process died",
            )
            for request_id in range(2, 12):  # serving goes on; the spans are dropped
                _prompts_get(server, "greet", request_id)
        assert "dropped" in server.log_path.read_text(errors="replace")


def _children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_each_worker_has_its_own_exporter_process_and_the_supervisor_none(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        server = ServerProcess(
            tmp_path / "data", args=["--workers", "2"], env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
        )
        with server:
            workers = _children(server.pid)
            assert len(workers) == 2
            wait_until(
                lambda: all(len(_children(worker)) == 1 for worker in workers),
                lambda: f"an exporter process under each worker; have {[_children(w) for w in workers]}",
            )
            for worker in workers:
                assert _exporter_pid(worker)


def test_stdio_keeps_stdout_for_json_rpc_when_the_console_exporter_prints_spans(tmp_path: Path) -> None:
    """The exporter process writes to stderr: stdout is the host's JSON-RPC channel."""
    lines = [
        article_initialize("2025-06-18"),
        INITIALIZED,
        TOOLS_LIST,
    ]
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    env["OTEL_TRACES_EXPORTER"] = "console"
    done = subprocess.run(
        [*mcp_registry_command(), "stdio", "--data-dir", str(tmp_path / "data")],
        input="".join(json.dumps(line) + "\n" for line in lines).encode(),
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    answers = [json.loads(line) for line in done.stdout.decode().splitlines()]  # JSON-RPC only
    assert [answer.get("id") for answer in answers] == [1, 2]
    assert '"name": "tools/list"' in done.stderr.decode(errors="replace")  # the span, on stderr


def test_an_exporter_process_that_cannot_start_costs_only_the_spans(caplog: pytest.LogCaptureFixture) -> None:
    outlet = PipeOutlet(["/nonexistent/python", "-m", "registry.tracing.exporter"], queue_size=100)
    with caplog.at_level(logging.ERROR, logger="registry.tracing"):
        outlet.start()
    assert outlet.dead
    outlet.put(record())
    assert outlet.dropped == 1
    outlet.close(timeout_s=5)
    assert any("could not be started" in r.getMessage() for r in caplog.records)
