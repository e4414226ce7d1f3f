"""Shared fixtures: every database-backed test runs on SQLite and again on real PostgreSQL.

PostgreSQL comes from ``REGISTRY_TEST_DATABASE_URL`` (CI sets it to the machine's server) or,
where a Docker engine is available, from testcontainers. Each test gets a database of its own, a
copy of one migrated once per session (``tests/databases.py``), so tests never see each other's
rows or notifications and do not pay for the migrations each time.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import uvicorn
from sqlalchemy import create_engine

from registry.app import create_app
from registry.config import Settings
from registry.db.engine import normalize_database_url
from registry.runtime import Registry
from registry.serving import bounded_heads
from tests.databases import (
    PostgresTemplate,
    SqliteTemplate,
    create_postgres_database,
    drop_retired,
    retire_postgres_database,
)
from tests.http import TLS
from tests.markers import classify
from tests.serve_process import ServerProcess
from tests.thread_server import port_of, serving_in_thread

if TYPE_CHECKING:
    from registry.tracing.sdk import Tracing

ADMIN_TOKEN = "test-admin-token-" + secrets.token_hex(8)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        classify(item)


def _docker_available() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env().ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str | None]:
    """A PostgreSQL server URL, or None (tests then skip with the reason)."""
    url = os.environ.get("REGISTRY_TEST_DATABASE_URL")
    if url:
        yield normalize_database_url(url)
        drop_retired()  # the tests' databases, kept until now (see retire_postgres_database)
        return
    if _docker_available():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver="psycopg") as pg:
            yield pg.get_connection_url()
        return
    yield None


def _fresh_postgres_schema(server_url: str) -> tuple[str, str]:
    """A new, empty database on the server: its URL and name (the name is historical: tests once
    got a schema each in one shared database; a database each keeps NOTIFY channels apart)."""
    return create_postgres_database(server_url)


def _drop_postgres_schema(server_url: str, name: str) -> None:
    retire_postgres_database(server_url, name)


def require_postgres(server_url: str | None) -> str:
    """The PostgreSQL server URL, or skip (fail under CI=true, where .ci/run provides one)."""
    if server_url is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("PostgreSQL is required under CI (REGISTRY_TEST_DATABASE_URL)")
        pytest.skip("PostgreSQL not available: set REGISTRY_TEST_DATABASE_URL or run a Docker engine (testcontainers)")
    return server_url


@contextmanager
def replica_pair(
    server_url: str,
    folder: Path,
    *,
    admin_token: str | None = None,
    b_env: dict[str, str] | None = None,
    make: Callable[..., ServerProcess] = ServerProcess,
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two registry processes on one fresh PostgreSQL database, as behind a load balancer: the same
    database, secret key and admin token. A starts (migrates, seeds the demo) before B."""
    url, schema = _fresh_postgres_schema(server_url)
    token = admin_token or "replica-admin-" + secrets.token_hex(6)
    common: dict[str, Any] = {"database_url": url, "admin_token": token, "args": ["--seed", "demo"]}
    a = make(folder / "a", name="replica-a", **common)
    b = make(folder / "b", name="replica-b", env=b_env, **common)
    try:
        a.start()
        b.start()
        yield a, b
    finally:
        a.stop()
        b.stop()
        _drop_postgres_schema(server_url, schema)


@contextmanager
def fresh_postgres_schema(server_url: str) -> Iterator[str]:
    """The URL of a new, empty database on the PostgreSQL server, dropped when the block ends."""
    url, schema = _fresh_postgres_schema(server_url)
    try:
        yield url
    finally:
        _drop_postgres_schema(server_url, schema)


@pytest.fixture
def postgres_url(postgres_server_url: str | None) -> Iterator[str]:
    """A new, empty PostgreSQL database (skipped without a server, failed under CI=true)."""
    with fresh_postgres_schema(require_postgres(postgres_server_url)) as url:
        yield url


@pytest.fixture(scope="session")
def postgres_template(postgres_server_url: str | None) -> Iterator[PostgresTemplate | None]:
    """This session's migrated PostgreSQL template (made on first use), dropped at the end."""
    if postgres_server_url is None:
        yield None
        return
    template = PostgresTemplate(postgres_server_url)
    yield template
    template.drop()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> SqliteTemplate:
    """This session's migrated SQLite file (made on first use)."""
    return SqliteTemplate(tmp_path_factory.mktemp("sqlite-template"))


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    postgres_server_url: str | None,
    postgres_template: PostgresTemplate | None,
    sqlite_template: SqliteTemplate,
) -> Iterator[str]:
    """A database of the test's own at the current migration, with no rows: a copy of the session's
    migrated template (SQLite in a temp folder, then PostgreSQL). Tests marked ``empty_database``
    get an empty one instead (migrations from scratch, upgrades from old schemas)."""
    empty = request.node.get_closest_marker("empty_database") is not None
    if request.param == "sqlite":
        path = tmp_path / "registry.db"
        yield f"sqlite:///{path}" if empty else sqlite_template.copy_to(path)
        return
    if postgres_server_url is None or postgres_template is None:
        pytest.skip(
            "PostgreSQL not available: set REGISTRY_TEST_DATABASE_URL or run a Docker engine for testcontainers"
        )
    server_url = postgres_server_url
    url, name = create_postgres_database(server_url) if empty else postgres_template.clone()
    try:
        yield url
    finally:
        retire_postgres_database(server_url, name)


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        admin_token=ADMIN_TOKEN,
        secret_key="test-secret-key",
    )


@pytest.fixture
def registry(settings: Settings) -> Iterator[Registry]:
    reg = Registry(settings)
    reg.prepare()
    yield reg
    reg.close()


class LiveServer:
    """The real ASGI app under uvicorn on a loopback port, on a thread of the test runner
    (``serving_in_thread``, with the app's lifespan and the server's own HTTP protocol).
    ``port`` and ``url`` are known once ``start`` returns."""

    def __init__(self, registry: Registry, *, tracing: Tracing | None = None) -> None:
        self.registry = registry
        self.app = create_app(registry, tracing=tracing)
        self.server: uvicorn.Server | None = None
        self.port = 0
        self.url = ""
        self._serving = ExitStack()

    def start(self) -> None:
        # As `mcp-registry serve` without REGISTRY_FORWARDED_ALLOW_IPS: no proxy headers believed.
        self.server = self._serving.enter_context(
            serving_in_thread(
                self.app,
                name="live-server",
                lifespan="auto",
                http=bounded_heads(self.registry.settings.limits.request_head_bytes),
                proxy_headers=False,
            )
        )
        self.port = port_of(self.server)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.app.mcp.drain()  # as on SIGTERM: open streams would hold uvicorn's graceful shutdown
        self._serving.close()

    def client(self, token: str | None = ADMIN_TOKEN) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, verify=TLS)


def start_live_server(settings: Settings, **overrides: Any) -> tuple[Registry, LiveServer]:
    """Another live server (and its registry) with some settings changed; the caller stops both."""
    registry = Registry(Settings(**{**settings.__dict__, **overrides}))
    registry.prepare()
    server = LiveServer(registry)
    server.start()
    return registry, server


@pytest.fixture
def hooked(settings: Settings) -> Iterator[LiveServer]:
    """A registry whose webhooks may reach loopback, where the test webhook server listens."""
    registry, server = start_live_server(settings, webhook_allowed_networks="127.0.0.0/8")
    yield server
    server.stop()
    registry.close()


@pytest.fixture
def live_server(registry: Registry) -> Iterator[LiveServer]:
    server = LiveServer(registry)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def api(live_server: LiveServer) -> Iterator[httpx.Client]:
    """An admin-scoped HTTP client for the live server."""
    with live_server.client() as client:
        yield client


@pytest.fixture
def raw(database_url: str) -> Iterator[Any]:
    """A connection pool of its own to the test database, for editing rows by hand (as someone
    with write access to the database, and not the server, would)."""
    engine = create_engine(normalize_database_url(database_url))
    yield engine
    engine.dispose()


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``mcp-registry ARGS`` run in this process: its exit code and what it printed (both streams)."""
    from registry.cli import main

    capsys.readouterr()
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out + captured.err
