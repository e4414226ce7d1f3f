"""The one place that creates engines and sessions.

SQLite is the embedded default; PostgreSQL (psycopg 3) is the production database. Both get the
same transactional behaviour the service layer relies on: a write transaction sees the row it is
about to change and nobody else can change it underneath (``SELECT ... FOR UPDATE`` on
PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite, which serialises writers instead of failing them).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker


def normalize_database_url(url: str) -> str:
    """Accept the URLs people paste (``postgres://``, ``postgresql://``) and pick the psycopg 3 driver."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def _create_private_file(path: Path) -> None:
    """Create the SQLite file readable by its owner only (0600) before SQLite does: it holds token
    hashes and encrypted secrets, and SQLite would create it with the umask's looser mode. Its -wal
    and -shm files take the database file's mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide when transactions begin.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


class Database:
    """Owns the engine and the session factory for one database URL."""

    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = normalize_database_url(url)
        parsed = make_url(self.url)
        self.dialect = parsed.get_backend_name()
        kwargs: dict[str, Any] = {"echo": echo, "future": True}
        if self.dialect == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                _create_private_file(Path(parsed.database))
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        else:
            kwargs.update(pool_pre_ping=True, pool_size=10, max_overflow=20)
        self.engine: Engine = create_engine(self.url, **kwargs)
        if self.dialect == "sqlite":
            _configure_sqlite(self.engine)
        self.session_factory = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A unit of work: committed when the block ends normally, rolled back otherwise."""
        with self.session_factory() as session, session.begin():
            yield session

    def dispose(self) -> None:
        self.engine.dispose()
