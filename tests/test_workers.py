"""``mcp-registry serve --workers N``: one port, N replica processes under one supervisor.

Real processes throughout: the supervisor is the process the test starts, its workers are the
processes it spawns. Each worker names itself in ``/metrics`` (``registry_worker_info``), which
is how the tests tell which worker answered a connection.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from registry.cli import main
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient
from tests.serve_process import ServerProcess
from tests.stream_listener import StreamListener
from tests.waiting import wait_until

WORKER_INFO = re.compile(r'registry_worker_info\{pid="(\d+)",worker="(\d+)"\} 1\.0')
STREAMS_OPEN = re.compile(r'mcp_streams_open\{worker="(\d+)"\} (\d+)\.0')

#: The workers' change-log poll (REGISTRY_CHANGE_POLL_S): longer than any wait in this module.
UNPOLLED_S = 3600


def worker_pids(supervisor_pid: int) -> set[int]:
    """The supervisor's child processes (its workers), from /proc."""
    children = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == supervisor_pid:
            children.add(int(stat.parent.name))
    return children


def answering_worker(client: httpx.Client) -> tuple[int, int, str]:
    """(pid, worker number, whole /metrics text) of the worker behind ``client``'s connection."""
    text = client.get("/metrics").text
    found = WORKER_INFO.search(text)
    assert found, text[:2000]
    return int(found.group(1)), int(found.group(2)), text


def single_connection(server: ServerProcess) -> httpx.Client:
    """An admin client that keeps one connection: every request reaches the same worker."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    return httpx.Client(
        base_url=server.url,
        headers={"Authorization": f"Bearer {server.admin_token}"},
        limits=limits,
        timeout=15,
        verify=TLS,
    )


def each_worker(server: ServerProcess, count: int = 2, attempts: int = 60) -> dict[int, tuple[int, str]]:
    """worker number -> (pid, /metrics text), from fresh connections until every worker answered."""
    seen: dict[int, tuple[int, str]] = {}
    for _ in range(attempts):
        with single_connection(server) as client:
            pid, number, text = answering_worker(client)
        seen[number] = (pid, text)
        if len(seen) == count:
            break
    return seen


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def workers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, postgres_server_url: str | None
) -> Iterator[ServerProcess]:
    """``serve --workers 2 --seed demo`` on an empty database, once per database for the module."""
    from tests.conftest import _drop_postgres_schema, _fresh_postgres_schema, require_postgres

    folder = tmp_path_factory.mktemp("workers")
    schema = None
    url = None
    if request.param == "postgresql":
        server_url = require_postgres(postgres_server_url)
        url, schema = _fresh_postgres_schema(server_url)
    # The change log's backstop poll is pushed out of every test's reach: what reaches a worker here came
    # through a sibling's poke (SQLite) or NOTIFY (PostgreSQL).
    server = ServerProcess(
        folder / "data",
        database_url=url,
        args=["--workers", "2", "--seed", "demo"],
        env={"REGISTRY_CHANGE_POLL_S": str(UNPOLLED_S)},
    )
    try:
        with server:
            yield server
    finally:
        if schema is not None:
            _drop_postgres_schema(require_postgres(postgres_server_url), schema)


def test_two_workers_answer_on_one_port(workers: ServerProcess) -> None:
    seen = each_worker(workers)
    assert sorted(seen) == [0, 1], "fresh connections never reached both workers"
    pids = {pid for pid, _ in seen.values()}
    assert len(pids) == 2 and workers.pid not in pids
    assert pids == worker_pids(workers.pid)  # the supervisor's own children, nothing else
    for _pid, text in seen.values():  # every sample of a worker carries its number
        samples = [line for line in text.splitlines() if line and not line.startswith("#")]
        assert samples and all('worker="' in line for line in samples)
    assert httpx.get(workers.url + "/healthz", verify=TLS).status_code == 200
    assert httpx.get(workers.url + "/readyz", verify=TLS).json() == {"status": "ok", "detail": "ok"}


def test_migrate_and_seed_ran_once(workers: ServerProcess) -> None:
    log = workers.log_tail(200_000)
    # Seeded by the supervisor only, before any worker started (on SQLite's default database the
    # demo goes in when it is empty, and --seed demo then finds it present: two lines, 9 created).
    seeding, started = log.split("worker 0 started", 1)
    assert sum(int(n) for n in re.findall(r"seed demo: (\d+) created", seeding)) == 9
    assert "seed demo" not in started, log
    assert "locked" not in log and "Traceback" not in log, log
    with workers.admin() as admin:
        names = [item["name"] for item in admin.get("/api/v1/prompts", params={"limit": 100}).json()["items"]]
    assert len(names) == len(set(names)) > 0


def test_an_edit_through_one_worker_reaches_a_stream_on_the_other(workers: ServerProcess) -> None:
    session = StreamableHttpClient(httpx.Client(base_url=workers.url, timeout=15, verify=TLS))
    session.initialize("2025-11-25")
    assert session.session_id
    listener = StreamListener(workers.url, session.session_id)
    try:
        assert listener.next().data == ""  # priming: the stream is open on one of the workers
        streaming = [number for number, (_, text) in each_worker(workers).items() if "} 1.0" in _streams(text)]
        assert len(streaming) == 1, "the stream is not open on exactly one worker"
        other = None
        for _ in range(60):
            client = single_connection(workers)
            if answering_worker(client)[1] != streaming[0]:
                other = client
                break
            client.close()
        assert other is not None, "no connection reached the worker without the stream"
        try:
            body = {
                "name": "workers-probe",
                "template": "Hi {{ who }}",
                "arguments": [{"name": "who", "required": True}],
            }
            assert other.post("/api/v1/prompts", json=body).status_code == 201
            # SQLite: the committing worker pokes its sibling; PostgreSQL: NOTIFY. The poll would come
            # only after UNPOLLED_S, far past this wait.
            event = listener.next(timeout=30)
        finally:
            other.close()
        assert event.json() == {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}
        answer = session.request("prompts/get", {"name": "workers-probe", "arguments": {"who": "x"}})
        assert answer["result"]["messages"][0]["content"]["text"] == "Hi x"
    finally:
        listener.close()


def _streams(metrics_text: str) -> str:
    return "\n".join(line for line in metrics_text.splitlines() if line.startswith("mcp_streams_open{"))


def test_a_killed_worker_is_replaced_and_sigterm_stops_all(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", args=["--workers", "2"])
    with server:
        before = worker_pids(server.pid)
        assert len(before) == 2
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        seen_pids: list[set[int]] = []  # the set that satisfied the wait, not a later look

        def replaced() -> bool:
            seen_pids.append(pids := worker_pids(server.pid))
            return len(pids) == 2 and victim not in pids

        wait_until(replaced, lambda: f"a replacement worker (workers now: {seen_pids[-1]})", timeout=30, interval=0.1)
        now = seen_pids[-1]
        assert "restarting it (restart 1 of 5" in server.log_tail()
        seen = each_worker(server)
        assert {pid for pid, _ in seen.values()} == now  # the replacement serves the same port
        started = time.monotonic()
        server.send_signal(signal.SIGTERM)
        assert server.wait_exit(timeout=15) == 0
        took = time.monotonic() - started
        assert took < 5, f"stopping took {took:.1f}s"
        assert not any(Path(f"/proc/{pid}").exists() for pid in now), "a worker outlived its supervisor"


def test_one_worker_is_a_single_process_as_before(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "data", env={"REGISTRY_WORKERS": "1"}) as server:
        assert worker_pids(server.pid) == set()  # no supervisor: this process serves
        with server.admin() as admin:
            text = admin.get("/metrics").text
        assert "registry_worker_info" not in text and 'worker="' not in text


def test_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--workers", "0", "--data-dir", str(tmp_path)]) == 2
    assert "--workers (REGISTRY_WORKERS) must be from 1 to 64, not 0" in capsys.readouterr().err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--workers", "2", "--port", str(port), "--data-dir", str(tmp_path)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
    assert not (tmp_path / "registry.db").exists()  # refused before anything was created
