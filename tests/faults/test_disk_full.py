"""Issue 24, section 4: a full disk under SQLite.

With the database unable to grow, every write answered a generic 500 ("Internal error ... see its
log") with a traceback in the log for each, and MCP ``initialize`` answered 500 ``text/plain``
while storing its session row. Now a refused write says what happened (503, "database or disk is
full": problem+json on the API, a page on the UI, JSON-RPC -32003 with the request's id on MCP),
the log gets one line when writes start failing and one when they work again, and reads keep
being served.

The fault is SQLite's own SQLITE_FULL: every connection the server checks out is capped with
``PRAGMA max_page_count`` at the file's current size, so a write that needs a new page is refused
by SQLite exactly as on a full disk, on the server's real write paths (no mount needed, so it
runs anywhere). Each write the test makes carries more than a page of text, so it needs new pages.

A cap leaves room for writes that fit in pages the file has, such as noting when a token was last
used, which a real full disk refuses too (the write-ahead log cannot grow); that one runs on a
small tmpfs (it needs root to mount: skipped without, but not under CI). So does PostgreSQL's
"could not extend file" (SQLSTATE 53100): a private cluster with the registry's database in a
tablespace on a small tmpfs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import secrets
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import event

from registry.api.problems import PROBLEM_JSON
from registry.config import Settings
from registry.db.diskfull import is_full
from registry.db.engine import is_unavailable
from registry.runtime import Registry
from tests.conftest import ADMIN_TOKEN, LiveServer
from tests.faults.pg_cluster import PG_USER, PgCluster, skip_unless_available
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient, article_initialize, open_session
from tests.ui.conftest import csrf_of, sign_in

#: More than a 4 KiB page of text: storing it needs new pages.
BIG = "lorem ipsum " * 2_000
FULL = "database or disk is full"
#: SQLite's own upper bound for max_page_count: no cap.
NO_CAP = 4_294_967_294


@dataclass
class CappedServer:
    """A live server on SQLite whose database can be held at its current size."""

    registry: Registry
    server: LiveServer
    path: Path
    cap: int = NO_CAP

    def fill(self) -> None:
        """From now on, no write may grow the database: SQLite answers SQLITE_FULL."""
        with sqlite3.connect(self.path) as probe:
            # Migrations that rebuild a table (SQLite's way to add a constraint) leave free pages,
            # which a write could fill without growing the file: give them back first.
            probe.execute("VACUUM")
            pages = probe.execute("PRAGMA page_count").fetchone()[0]
            free = probe.execute("PRAGMA freelist_count").fetchone()[0]
        assert free == 0, f"{free} free pages would let writes through"
        self.cap = pages

    def free(self) -> None:
        self.cap = NO_CAP


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[CappedServer]:
    path = tmp_path / "registry.db"
    settings = Settings(
        data_dir=tmp_path / "data", database_url=f"sqlite:///{path}", admin_token=ADMIN_TOKEN, secret_key="k"
    )
    registry = Registry(settings)
    registry.prepare()
    capped = CappedServer(registry, LiveServer(registry), path)

    @event.listens_for(registry.db.engine, "checkout")
    def _cap(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA max_page_count={capped.cap}")
        cursor.close()

    capped.server.start()
    try:
        yield capped
    finally:
        capped.server.stop()
        registry.close()


def _ui_form(csrf: str, name: str) -> dict[str, str]:
    return {
        "csrf_token": csrf,
        "name": name,
        "msg-0-role": "user",
        "msg-0-type": "text",
        "msg-0-text": BIG,
        "publish": "production",
        "op": "save",
    }


def _big_initialize() -> dict[str, Any]:
    message = article_initialize("2025-11-25")
    message["params"]["clientInfo"]["description"] = "x" * 9_000  # within session_metadata_bytes
    return message


def test_a_full_database_refuses_writes_with_503_says_so_and_keeps_serving_reads(
    capped: CappedServer, caplog: pytest.LogCaptureFixture
) -> None:
    server = capped.server
    with server.client() as api, httpx.Client(base_url=server.url, timeout=30, verify=TLS) as browser:
        assert api.post("/api/v1/prompts", json={"name": "before", "template": "kept as it was"}).status_code == 201
        assert sign_in(browser, ADMIN_TOKEN).status_code == 303
        csrf = csrf_of(browser, "/ui/prompts/-/new")
        agent = open_session(server.url)
        caplog.clear()
        caplog.set_level(logging.INFO)

        capped.fill()
        # API writes: 503 problem+json naming the cause, with a Retry-After; none stored.
        for n in range(3):
            refused = api.post("/api/v1/prompts", json={"name": f"full-{n}", "template": BIG})
            assert refused.status_code == 503, refused.text
            assert refused.headers["content-type"] == "application/problem+json"
            assert FULL in refused.json()["detail"] and int(refused.headers["retry-after"]) > 0
        # A UI write: a 503 page that says the disk is full, not "something went wrong".
        page = browser.post("/ui/prompts/-/new", data=_ui_form(csrf, "full-ui"))
        assert page.status_code == 503, page.text[:500]
        assert "text/html" in page.headers["content-type"] and FULL in page.text
        # MCP initialize storing its session row: JSON-RPC -32003 with the request's id.
        fresh = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=30, verify=TLS))
        answer = fresh.post(_big_initialize())
        assert answer.status_code == 503, answer.text
        assert answer.headers["content-type"].startswith("application/json")
        body = answer.json()
        assert body["id"] == 1 and body["error"]["code"] == -32003 and FULL in body["error"]["message"], body
        assert "mcp-session-id" not in answer.headers

        # Reads keep being served: the API, the UI, an open MCP session.
        listed = api.get("/api/v1/prompts")
        assert listed.status_code == 200 and "before" in {p["name"] for p in listed.json()["items"]}
        assert browser.get("/ui/prompts").status_code == 200
        prompts = agent.request("prompts/list", {})
        assert "before" in {p["name"] for p in prompts["result"]["prompts"]}

        # One line for the episode, no traceback for any refused write.
        full_lines = [r for r in caplog.records if FULL in r.getMessage()]
        assert len(full_lines) == 1, [r.getMessage() for r in full_lines]
        assert full_lines[0].name == "registry.db" and full_lines[0].levelno == logging.ERROR
        assert [r.getMessage() for r in caplog.records if r.exc_info] == []

        # Space freed: the next write works, and one line says writes work again.
        capped.free()
        created = api.post("/api/v1/prompts", json={"name": "after", "template": BIG})
        assert created.status_code == 201, created.text
        again = [r.getMessage() for r in caplog.records if "writes work again" in r.getMessage()]
        assert len(again) == 1 and "5 writes refused" in again[0], again
        assert fresh.post(_big_initialize()).status_code == 200
        names = {p["name"] for p in api.get("/api/v1/prompts").json()["items"]}
        assert {"before", "after"} <= names and not any(n.startswith("full-") for n in names)
        agent.http.close()
        fresh.http.close()


def test_a_second_episode_is_logged_again(capped: CappedServer, caplog: pytest.LogCaptureFixture) -> None:
    with capped.server.client() as api:
        caplog.set_level(logging.INFO)
        for episode in range(2):
            capped.fill()
            for n in range(2):
                assert api.post("/api/v1/prompts", json={"name": f"e{episode}-{n}", "template": BIG}).status_code == 503
            capped.free()
            assert api.post("/api/v1/prompts", json={"name": f"ok-{episode}", "template": BIG}).status_code == 201
    messages = [r.getMessage() for r in caplog.records if r.name == "registry.db"]
    starts = [m for m in messages if FULL in m]
    ends = [m for m in messages if "writes work again" in m]
    assert len(starts) == 2 and len(ends) == 2, messages


def test_postgres_disk_full_is_a_full_disk_too() -> None:
    """PostgreSQL's disk_full (SQLSTATE 53100, "could not extend file") is named the same way;
    other PostgreSQL and SQLite errors are not."""
    assert is_full(psycopg.errors.DiskFull('could not extend file "base/16384/16385": No space left on device'))
    assert is_unavailable(psycopg.errors.DiskFull("could not extend file"))
    assert is_full(sqlite3.OperationalError(FULL))
    assert not is_full(psycopg.errors.UniqueViolation("duplicate key"))
    assert not is_full(sqlite3.OperationalError("database is locked"))


@contextlib.contextmanager
def _small_filesystem(path: Path, size: str = "16M") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` for the block."""
    path.mkdir()
    mount = shutil.which("mount")
    result = (
        subprocess.run([mount, "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], capture_output=True)
        if mount
        else None
    )
    if result is None or result.returncode != 0:
        reason = "cannot mount a tmpfs here: " + (result.stderr.decode().strip() if result else "no mount command")
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(folder: Path) -> Path:
    """Take every free byte of ``folder``'s file system; the file to delete to free them again."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (1 << 20, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
    finally:
        os.close(fd)
    return filler


def test_on_a_full_disk_a_token_used_for_the_first_time_still_reads(tmp_path: Path) -> None:
    """Verifying a token notes when it was last used, a write: refused by a full disk, it turned
    the read of a token not yet cached into a 503. The read is served; the note is skipped."""
    with _small_filesystem(tmp_path / "disk") as disk:
        settings = Settings(
            data_dir=disk / "data", database_url=f"sqlite:///{disk / 'registry.db'}", admin_token=ADMIN_TOKEN
        )
        registry = Registry(settings)
        registry.prepare()
        server = LiveServer(registry)
        server.start()
        try:
            with server.client() as api:
                reader = api.post("/api/v1/tokens", json={"name": "reader", "scopes": ["viewer"]}).json()["token"]
                assert api.post("/api/v1/prompts", json={"name": "kept", "template": "as it was"}).status_code == 201
                filler = _fill(disk)
                refused = api.post("/api/v1/prompts", json={"name": "refused", "template": BIG})
                assert refused.status_code == 503 and FULL in refused.json()["detail"], refused.text
                with server.client(reader) as viewer:
                    listed = viewer.get("/api/v1/prompts")
                    assert listed.status_code == 200, listed.text
                    assert {p["name"] for p in listed.json()["items"]} == {"kept"}
                filler.unlink()
                assert api.post("/api/v1/prompts", json={"name": "after", "template": BIG}).status_code == 201
        finally:
            server.stop()
            registry.close()


def test_postgres_out_of_disk_space_answers_503_and_logs_one_episode(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL's own "could not extend file ... No space left on device" (SQLSTATE 53100): a
    private cluster whose registry database lives in a tablespace on a small tmpfs, filled up."""
    skip_unless_available()
    with PgCluster() as cluster, _small_filesystem(cluster.root / "disk", size="64M") as disk:
        tablespace = disk / "pg"
        tablespace.mkdir()
        owner = pwd.getpwnam(PG_USER)
        os.chown(disk, owner.pw_uid, owner.pw_gid)
        os.chown(tablespace, owner.pw_uid, owner.pw_gid)
        with psycopg.connect(cluster.url(), autocommit=True) as conn:
            conn.execute(f"CREATE TABLESPACE small LOCATION '{tablespace}'")
            conn.execute('CREATE DATABASE "registry" TABLESPACE small')
        settings = Settings(data_dir=tmp_path / "data", database_url=cluster.url("registry"), admin_token=ADMIN_TOKEN)
        registry = Registry(settings)
        registry.prepare()
        server = LiveServer(registry)
        server.start()
        try:
            with server.client() as api:
                assert api.post("/api/v1/prompts", json={"name": "kept", "template": "as it was"}).status_code == 201
                caplog.clear()
                caplog.set_level(logging.INFO)
                filler = _fill(disk)
                for n in range(3):  # incompressible, so every one needs new pages
                    body = {"name": f"refused-{n}", "template": secrets.token_urlsafe(96_000)}
                    refused = api.post("/api/v1/prompts", json=body)
                    assert refused.status_code == 503, refused.text
                    assert FULL in refused.json()["detail"] and refused.headers["content-type"] == PROBLEM_JSON
                listed = api.get("/api/v1/prompts")
                assert listed.status_code == 200 and {p["name"] for p in listed.json()["items"]} == {"kept"}
                full_lines = [r for r in caplog.records if FULL in r.getMessage()]
                assert len(full_lines) == 1 and "could not extend file" in full_lines[0].getMessage(), [
                    r.getMessage() for r in full_lines
                ]
                assert [r.getMessage() for r in caplog.records if r.exc_info] == []
                filler.unlink()
                body = {"name": "after", "template": secrets.token_urlsafe(96_000)}
                assert api.post("/api/v1/prompts", json=body).status_code == 201
                assert len([r for r in caplog.records if "writes work again" in r.getMessage()]) == 1
        finally:
            server.stop()
            registry.close()
