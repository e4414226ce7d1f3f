"""Running Alembic from inside the package, wherever it is installed.

Several processes may start on one empty database at the same moment (replicas rolled out
together, two local servers on one data folder). Creating tables and seeding are not safe to run
twice at once, so ``exclusive`` serialises them across processes: a PostgreSQL advisory lock, or
a file lock next to the SQLite file. The second process then finds the schema current and the
seed entries present, and does nothing.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

from registry.db.engine import Database, deadline
from registry.paths import migrations_dir

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no cross-process lock for SQLite there
    fcntl = None  # type: ignore[assignment]

#: The advisory lock held while one process migrates and seeds (any fixed 63-bit number; this is
#: "mcpreg" in ASCII, so it is recognisable in pg_locks).
PREPARE_LOCK_KEY = 0x6D6370726567


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # ConfigParser interpolation would choke on '%' in passwords.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


@contextmanager
def exclusive(db: Database) -> Iterator[None]:
    """Hold the database's preparation lock for the block: one process at a time, across hosts
    (PostgreSQL) or on this host (SQLite). Waiting for it is unbounded: the holder is migrating."""
    if db.is_postgres:
        with deadline(None), db.engine.connect() as conn:
            # A transaction-scoped lock: released by the rollback below, or when the process dies.
            conn.execute(text("SET LOCAL statement_timeout = 0"))
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PREPARE_LOCK_KEY})
            try:
                yield
            finally:
                conn.rollback()
        return
    path = db.sqlite_path
    if path is None or fcntl is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def upgrade(db: Database, revision: str = "head") -> None:
    command.upgrade(alembic_config(db.url), revision)


def check(db: Database) -> None:
    """Raise if the models and the migrations disagree (``alembic check``)."""
    command.check(alembic_config(db.url))


@functools.lru_cache(maxsize=16)
def _head(url: str) -> str | None:
    """The newest migration: read from the scripts once (they do not change while running), so
    that /readyz, which asks on every probe, costs one small query."""
    return ScriptDirectory.from_config(alembic_config(url)).get_current_head()


def current_revision(db: Database) -> str | None:
    """The revision the database is at (None: no schema yet)."""
    with db.engine.connect() as conn:
        revision: str | None = MigrationContext.configure(conn).get_current_revision()
    return revision


def is_current(db: Database) -> bool:
    head = _head(db.url)
    with db.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision() == head
