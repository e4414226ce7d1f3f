"""Item 14 of issue 7: several processes starting at once on an empty database all come up.

Two ``mcp-registry serve`` processes started at the same moment on one empty data folder (SQLite)
raced through migrations and demo seeding: one of them exited in 6 of 14 trials ("table
api_tokens already exists", or "prompt 'bug-analysis-report' already exists"). Preparing the
database now happens under a lock (a file lock next to the SQLite file; a PostgreSQL advisory
lock), and seeding counts an entry another process just created as already present.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import _drop_postgres_schema, _fresh_postgres_schema
from tests.http import TLS
from tests.serve_process import ServerProcess

TRIALS = 8


def _start_together(servers: list[ServerProcess]) -> None:
    """Spawn every process first, then wait for each: they migrate and seed at the same time."""
    for server in servers:
        server.start(wait=None)
    for server in servers:
        server.wait_ready(timeout=90)


def _demo_prompts(server: ServerProcess) -> list[str]:
    with server.admin() as client:
        response = client.get("/api/v1/prompts")
        assert response.status_code == 200, response.text
        return sorted(item["name"] for item in response.json()["items"])


@pytest.mark.parametrize("trial", range(TRIALS))
def test_two_sqlite_processes_start_together_on_an_empty_folder(tmp_path: Path, trial: int) -> None:
    data = tmp_path / "data"
    servers = [ServerProcess(data, name=f"sqlite-{trial}-{n}") for n in range(2)]
    try:
        _start_together(servers)
        for server in servers:
            assert server.proc is not None and server.proc.poll() is None, server.log_tail()
        # Both see one demo catalog, seeded once.
        assert _demo_prompts(servers[0]) == _demo_prompts(servers[1])
        assert "bug-analysis-report" in _demo_prompts(servers[0])
        with servers[1].admin() as client:
            versions = client.get("/api/v1/prompts/bug-analysis-report/versions").json()
        assert len(versions["items"]) == 1, versions
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def empty_postgres(postgres_server_url: str | None) -> Iterator[str]:
    if postgres_server_url is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL is required under CI (REGISTRY_TEST_DATABASE_URL)")
        pytest.skip("PostgreSQL not available: set REGISTRY_TEST_DATABASE_URL")
    url, schema = _fresh_postgres_schema(postgres_server_url)
    try:
        yield url
    finally:
        _drop_postgres_schema(postgres_server_url, schema)


@pytest.mark.parametrize("trial", range(3))
def test_two_postgres_processes_start_together_on_an_empty_schema(
    tmp_path: Path, empty_postgres: str, trial: int
) -> None:
    servers = [
        ServerProcess(tmp_path / f"d{n}", database_url=empty_postgres, args=["--seed", "demo"], name=f"pg-{trial}-{n}")
        for n in range(2)
    ]
    try:
        _start_together(servers)
        assert _demo_prompts(servers[0]) == _demo_prompts(servers[1])
        assert httpx.get(servers[1].url + "/readyz", timeout=5, verify=TLS).status_code == 200
    finally:
        for server in servers:
            server.stop()
