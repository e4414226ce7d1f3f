"""The exporter process and the pipe to it: a real ``mcp-registry serve`` exports through its own
child process; the queue is bounded (drops counted, logged once); a dead exporter process costs
the server nothing but its spans; at stop, what was queued is exported."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from pathlib import Path

import pytest

from registry.tracing.pipe import PipeOutlet
from registry.tracing.records import SERVER
from tests.factories import prompt_body
from tests.interop.mcp_wire import ACCEPT_BOTH
from tests.serve_process import ServerProcess
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
