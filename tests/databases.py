"""Test databases: migrated once per session, cloned for each test.

Migrating an empty database costs about half a second (fourteen Alembic revisions), and most
tests want a migrated one, so each test session (each xdist worker is a session of its own)
migrates one template per backend and every test gets a copy:

- SQLite: the template file is copied (``shutil.copyfile``, about a millisecond).
- PostgreSQL: ``CREATE DATABASE t_<hex> TEMPLATE tmpl_<hex>`` (PostgreSQL 15's default
  ``WAL_LOG`` strategy: ~35 ms here, where ``FILE_COPY`` took ~110 ms because it checkpoints),
  dropped again when the test ends.

A database per test rather than a schema per test in one shared database also keeps PostgreSQL's
LISTEN/NOTIFY channels apart: they belong to a database, so tests that run at the same time (on
xdist workers) never hear each other's change notifications.

A clone is at the current migration and holds no rows, exactly what migrating an empty database
leaves (the migrations write no rows into an empty catalog), so ``Registry.prepare()`` on it finds
the schema current (a no-op upgrade, ~40 ms) and goes on to the admin token and the seeds.
"""

from __future__ import annotations

import functools
import secrets
import shutil
from pathlib import Path

from sqlalchemy import Engine, create_engine, make_url, text

from registry.db import migrate
from registry.db.engine import Database


@functools.cache
def _admin_engine(server_url: str) -> Engine:
    """Connections to the server's own database for CREATE/DROP DATABASE (never to a template:
    PostgreSQL refuses to copy a database someone is connected to)."""
    return create_engine(server_url, isolation_level="AUTOCOMMIT", pool_size=2)


def database_on(server_url: str, name: str) -> str:
    """The URL of database ``name`` on the server of ``server_url``."""
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


def create_postgres_database(server_url: str, *, template: str | None = None, prefix: str = "t_") -> tuple[str, str]:
    """A new database on the server (empty, or a copy of ``template``): its URL and its name."""
    name = prefix + secrets.token_hex(6)
    copy = f' TEMPLATE "{template}" STRATEGY WAL_LOG' if template else ""
    with _admin_engine(server_url).connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"{copy}'))
    return database_on(server_url, name), name


def drop_postgres_database(server_url: str, name: str) -> None:
    """Drop a test database, ending any connection a test left open to it (``WITH (FORCE)``)."""
    with _admin_engine(server_url).connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


#: Databases tests are done with, dropped when the session ends (``drop_retired``).
_retired: list[tuple[str, str]] = []


def retire_postgres_database(server_url: str, name: str) -> None:
    """A test is done with a database: its connections end now (a leaked one must not hold a server slot), and
    the database is dropped when the session ends. Not at once: PostgreSQL 15 checkpoints on every DROP
    DATABASE, and with three workers writing, a drop per test cost ~2 s of waiting each (one run counted 493
    requested checkpoints and ~1,000 s of checkpoint writes and syncs)."""
    with _admin_engine(server_url).connect() as conn:
        conn.execute(
            text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :name"), {"name": name}
        )
    _retired.append((server_url, name))


def drop_retired() -> None:
    """Drop the databases retired in this session (one checkpoint each, now that nothing else writes)."""
    while _retired:
        drop_postgres_database(*_retired.pop())


def _migrate(url: str) -> None:
    db = Database(url)
    try:
        migrate.upgrade(db)
    finally:
        db.dispose()  # a template must have no open connection when it is copied


class PostgresTemplate:
    """One migrated database on the server, created on first use and copied for each test."""

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self.name: str | None = None

    def clone(self) -> tuple[str, str]:
        """A migrated database of the test's own: its URL and name (drop it with ``drop_postgres_database``)."""
        if self.name is None:
            url, name = create_postgres_database(self.server_url, prefix="tmpl_")
            try:
                _migrate(url)
            except BaseException:
                drop_postgres_database(self.server_url, name)
                raise
            self.name = name
        return create_postgres_database(self.server_url, template=self.name)

    def drop(self) -> None:
        if self.name is not None:
            drop_postgres_database(self.server_url, self.name)
            self.name = None


class SqliteTemplate:
    """One migrated SQLite file in the session's temporary folder, copied for each test."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "template.db"
        self._ready = False

    def copy_to(self, path: Path) -> str:
        """Copy the migrated template to ``path``; the URL of the copy."""
        if not self._ready:
            _migrate(f"sqlite:///{self.path}")
            # The last connection's close checkpoints the WAL into the file and removes it, so the
            # file alone is the whole database.
            if Path(f"{self.path}-wal").exists():
                raise RuntimeError(f"{self.path}: the write-ahead log outlived the last connection")
            self._ready = True
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.path, path)
        return f"sqlite:///{path}"
