"""The one place that creates engines and sessions.

SQLite is the embedded default; PostgreSQL (psycopg 3) is the production database. Both get the
same transactional behaviour the service layer relies on: a write transaction sees the row it is
about to change and nobody else can change it underneath (``SELECT ... FOR UPDATE`` on
PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite, which serialises writers instead of failing them).

An unreachable database must be answered quickly, never waited on: every PostgreSQL connection
has a connect timeout and a server-side statement timeout, and every round trip on it a
client-side bound too, because a *frozen* server (SIGSTOP, a stalled disk or VM) accepts TCP
connections and acknowledges data but never answers, so neither of the first two ever fires
(nor do TCP keepalives: the kernel answers them). A pooled connection is pinged with a short
bound before it is handed out; when that ping (or a connect) times out, the database is taken
to be unavailable for a moment and callers get ``DatabaseUnavailable`` at once instead of each
waiting out a timeout of their own. ``is_unavailable`` tells callers which errors mean "the
database cannot be reached right now" (answer 503 / "temporarily unavailable", retry later).

A full disk is such an error too (SQLite's SQLITE_FULL, PostgreSQL's SQLSTATE 53100), but one that
lasts until an operator frees space, and one that refuses only writes: ``is_full`` tells it apart
so callers can say so, and ``Database`` logs it once per episode (a line when writes start failing
and one when a write succeeds again), not a traceback per refused write.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from sqlalchemy import Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from registry.db.diskfull import FullEpisodes, is_full

if TYPE_CHECKING:
    from registry.config import Settings


def _create_private_file(path: Path) -> None:
    """Create the SQLite file readable by its owner only (0600) before SQLite does: it holds token
    hashes and encrypted secrets, and SQLite would create it with the umask's looser mode. Its -wal
    and -shm files take the database file's mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


#: Where a session carries its database's audit key, for the change log's appenders.
AUDIT_KEY_INFO = "audit_key"


class DatabaseUnavailable(Exception):
    """The database cannot be reached right now (down, frozen, refusing connections)."""


class DatabaseTimeout(psycopg.OperationalError):
    """The server did not answer a round trip in time; the connection was closed (it is mid-protocol)."""


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` means the database cannot be reached or cannot serve right now (retry
    later), as opposed to a fault in the request or in the code. A full disk is one (``is_full``)."""
    if isinstance(exc, DatabaseUnavailable | sa_exc.TimeoutError):  # the latter: no pooled connection free
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        return is_unavailable(exc.orig) if isinstance(exc.orig, BaseException) else False
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        # Connection failures and timeouts, statement_timeout, admin shutdown, "cannot connect now".
        return True
    if isinstance(exc, sqlite3.OperationalError):
        message = str(exc).lower()
        return is_full(exc) or any(part in message for part in ("locked", "busy", "unable to open", "disk i/o"))
    return False


def describe(exc: BaseException) -> str:
    """One line about a database error, for logs and answers (no SQL, no parameters)."""
    if isinstance(exc, sa_exc.DBAPIError) and isinstance(exc.orig, BaseException):
        exc = exc.orig
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first_line}"[:200]


#: Warnings about an unreachable database: at most one per this many seconds per place.
_WARN_EVERY_S = 10.0
_last_warned: dict[str, float] = {}


def warn_unavailable(logger: logging.Logger, where: str, exc: BaseException) -> None:
    """Log that ``where`` met an unreachable database, at most once per ``_WARN_EVERY_S`` for each
    ``where``: during an outage every request fails alike, and one line says it. A full disk is
    not logged here: ``Database`` logs its episode once, where the write failed."""
    if is_full(exc):
        return
    now = time.monotonic()
    if now - _last_warned.get(where, -math.inf) >= _WARN_EVERY_S:
        _last_warned[where] = now
        logger.warning("database unavailable (%s): %s", where, describe(exc))


#: Absolute ``time.monotonic()`` by which every PostgreSQL round trip in this context must end;
#: ``math.inf``: no client-side bound at all (a lock wait); None: the connection's own bound.
#: A ContextVar, so ``asyncio.to_thread`` (which copies the context) carries it to the worker.
_deadline: ContextVar[float | None] = ContextVar("registry_db_deadline", default=None)

#: Set by ``Database.session`` while a full-disk episode lasts: the transaction's "it wrote" flag,
#: which the ``after_cursor_execute`` listener raises on an INSERT, UPDATE or DELETE.
_wrote: ContextVar[list[bool] | None] = ContextVar("registry_db_wrote", default=None)
_WRITES = ("INSERT", "UPDATE", "DELETE")

#: Seconds one connect attempt may wait on the server (``BoundedConnection._connect_gen``: connect
#: is a classmethod, so it cannot read the bound off a connection); None: psycopg's own timeout.
_connect_bound: ContextVar[float | None] = ContextVar("registry_db_connect_bound", default=None)


@contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Bound every PostgreSQL round trip made inside (and in threads started from it with
    ``asyncio.to_thread``) to end within ``seconds`` from now; None lifts every client-side bound
    (for waits that are meant to be long, like a migration lock)."""
    if seconds is None:
        limit = math.inf
    else:
        limit = time.monotonic() + seconds
        outer = _deadline.get()
        if outer is not None and outer != math.inf:
            limit = min(limit, outer)  # an inner bound never extends the caller's
    token = _deadline.set(limit)
    try:
        yield
    finally:
        _deadline.reset(token)


def _round_trip_timeout(default: float | None) -> float | None:
    limit = _deadline.get()
    if limit is None:
        return default
    if limit == math.inf:
        return None
    remaining = max(0.0, limit - time.monotonic())
    return remaining if default is None else min(default, remaining)


#: A look at the socket this long after the previous one means this process was not running in
#: between (psycopg's wait functions look every 0.1 s while waiting)...
_UNWATCHED_GAP_S = 0.5
#: ...and moves the bound on by that gap, up to this much in all: a silent server is still given up
#: on, later, when the process keeps being starved.
_UNWATCHED_MAX_S = 30.0


def _bounded(
    gen: Generator[Any, Any, Any],
    limit: float,
    seconds: float,
    timeout: Callable[[str], Exception] = DatabaseTimeout,
) -> Generator[Any, Any, Any]:
    """Pass psycopg's wait protocol through, giving up once ``limit`` (monotonic) has passed
    (raising ``timeout``: ``DatabaseTimeout`` for a round trip, ``ConnectionTimeout`` for a connect).

    psycopg's wait functions wake up every interval even when nothing arrives and then send the
    generator a "nothing ready" value: that is where a silent server is noticed. The bound is on
    the server's silence, not on this process's scheduling, or an answer that came at once but
    was read late (the process stopped, starved of CPU, or another thread holding the
    interpreter) would be taken for a dead database, with a 503 for every caller for
    AVAILABILITY_HOLD_S. So:

    - an answer found by the first look after the limit is taken when the look before was in
      time (it may have come before the limit; the process looked late);
    - a gap of more than ``_UNWATCHED_GAP_S`` between two looks (the process was not running)
      moves the limit on by the gap, up to ``_UNWATCHED_MAX_S`` in all.

    A zero bound stays spent: nothing is read under it. The caller's own ``deadline`` is not
    moved: a wait that starts after it has passed is given no time."""
    looked = time.monotonic()
    moved = 0.0

    def look() -> float:
        """Note a look now (moving the limit on after an unwatched gap); the one before's time."""
        nonlocal looked, limit, moved
        now = time.monotonic()
        gap = now - looked
        if gap > _UNWATCHED_GAP_S and moved < _UNWATCHED_MAX_S:
            step = min(gap, _UNWATCHED_MAX_S - moved)
            limit += step
            moved += step
        previous, looked = looked, now
        return previous

    try:
        state = next(gen)  # sends the request: it may give up the interpreter too
        look()
        while True:
            ready = yield state
            previous = look()
            if looked >= limit and not (ready and previous < limit):
                raise timeout(f"the database did not answer within {seconds:.1f}s")
            state = gen.send(ready)
    except StopIteration as done:
        return done.value
    finally:
        gen.close()


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every wait on the server is bounded (see the module docstring).

    psycopg funnels every round trip (execute, fetch, commit, rollback) through ``wait``; a wait
    that times out leaves the protocol mid-message, so the connection is closed, which is also
    what tells SQLAlchemy to discard it (and the rest of the pool)."""

    #: Longest a round trip may take when no ``deadline`` applies (None: unbounded).
    round_trip_timeout_s: float | None = None

    @classmethod
    def _connect_gen(cls, conninfo: str = "", *args: Any, **kwargs: Any) -> Any:
        """One connect attempt, bounded the way a round trip is: on the server's silence, not on
        this process's scheduling. psycopg's own connect timeout is wall time, so a process
        stopped or starved while a healthy server answered its connect took the database for
        dead (and answered 503 for ``AVAILABILITY_HOLD_S``). ``Database`` sets the bound and
        leaves psycopg's timeout as the outer limit, past every move ``_bounded`` allows."""
        gen = super()._connect_gen(conninfo, *args, **kwargs)
        seconds = _connect_bound.get()
        if seconds is None:
            return gen
        return _bounded(gen, time.monotonic() + seconds, seconds, psycopg.errors.ConnectionTimeout)

    def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        seconds = _round_trip_timeout(self.round_trip_timeout_s)
        if seconds is None:
            return super().wait(gen, *args, **kwargs)
        try:
            return super().wait(_bounded(gen, time.monotonic() + seconds, seconds), *args, **kwargs)
        except DatabaseTimeout:
            self.close()
            raise


#: How long a failed liveness check is remembered: callers in that window are answered 503 at once
#: instead of each waiting out its own ping (a frozen database costs one ping per window, not one
#: per request).
AVAILABILITY_HOLD_S = 2.0


class _Availability:
    """Remembers, for a moment, that the database just failed a liveness check (a ping or a
    connect that timed out), so the callers right after are told at once."""

    HOLD_S = AVAILABILITY_HOLD_S

    def __init__(self) -> None:
        self._until = 0.0
        self._reason = ""

    def failed(self, reason: str) -> None:
        self._reason = reason
        self._until = time.monotonic() + self.HOLD_S

    def check(self) -> None:
        if time.monotonic() < self._until:
            raise DatabaseUnavailable(f"the database is not answering ({self._reason}); retrying shortly")


def _note_write(_conn: Any, _cursor: Any, statement: str, _parameters: Any, _context: Any, _executemany: bool) -> None:
    """After each statement: during a full-disk episode, note that the transaction wrote (a
    commit then proves writes work again). Costs one ContextVar read otherwise."""
    wrote = _wrote.get()
    if wrote is not None and not wrote[0] and statement.lstrip()[:6].upper() in _WRITES:
        wrote[0] = True


def normalize_database_url(url: str) -> str:
    """Accept the URLs people paste (``postgres://``, ``postgresql://``) and pick the psycopg 3 driver."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def _configure_sqlite(engine: Engine, busy_timeout_s: float, *, read_only: bool = False) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide when transactions begin.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        if read_only:
            cur.execute("PRAGMA query_only=ON")
        else:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # A reader's deferred transaction is a consistent snapshot that never blocks writers (WAL).
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


class Database:
    """Owns the engine and the session factory for one database URL.

    ``connect_timeout_s``: PostgreSQL connect timeout (libpq counts whole seconds, at least 2).
    ``statement_timeout_s``: PostgreSQL ``statement_timeout``; a round trip that gets no answer
    for this long plus ``ROUND_TRIP_GRACE_S`` means the server is frozen, and is abandoned.
    ``ping_timeout_s``: how long a pooled connection's liveness check waits for an answer.
    ``busy_timeout_s``: SQLite's wait for a lock held by another connection or process.
    ``read_only``: open an existing database for reading only (``import --plan``, ``export``): the
    SQLite file is opened ``mode=ro`` and never created, PostgreSQL transactions are read-only.
    """

    ROUND_TRIP_GRACE_S = 2.0

    @classmethod
    def from_settings(cls, settings: Settings, *, read_only: bool = False) -> Database:
        """The configured database, with the configured timeouts (the server and the CLI alike)."""
        return cls(
            settings.effective_database_url,
            connect_timeout_s=settings.db_connect_timeout_s,
            statement_timeout_s=settings.db_statement_timeout_s,
            ping_timeout_s=settings.db_ping_timeout_s,
            busy_timeout_s=settings.db_busy_timeout_s,
            read_only=read_only,
        )

    def __init__(
        self,
        url: str,
        *,
        echo: bool = False,
        connect_timeout_s: float = 2.0,
        statement_timeout_s: float = 15.0,
        ping_timeout_s: float = 2.0,
        busy_timeout_s: float = 30.0,
        read_only: bool = False,
    ) -> None:
        self.url = normalize_database_url(url)
        parsed = make_url(self.url)
        self.dialect = parsed.get_backend_name()
        self.read_only = read_only
        self.connect_timeout_s = connect_timeout_s
        self.statement_timeout_s = statement_timeout_s
        self.ping_timeout_s = ping_timeout_s
        self.availability = _Availability()
        #: Writes refused because the database or its disk is full (logged once per episode).
        self.full = FullEpisodes()
        kwargs: dict[str, Any] = {"echo": echo, "future": True}
        if self.dialect == "sqlite":
            if read_only and parsed.database and parsed.database != ":memory:":
                ro_uri = Path(parsed.database).absolute().as_uri() + "?mode=ro"
                kwargs["creator"] = lambda: sqlite3.connect(
                    ro_uri, uri=True, check_same_thread=False, timeout=busy_timeout_s
                )
            elif parsed.database and parsed.database != ":memory:":
                _create_private_file(Path(parsed.database))
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": busy_timeout_s}
        else:
            # No pool_pre_ping: _configure_postgres pings with a short bound of its own.
            kwargs.update(pool_size=10, max_overflow=20, pool_timeout=max(connect_timeout_s, 1.0))
        self.engine: Engine = create_engine(self.url, **kwargs)
        if self.dialect == "sqlite":
            _configure_sqlite(self.engine, busy_timeout_s, read_only=read_only)
        elif self.is_postgres:
            self._configure_postgres()
        self.session_factory = sessionmaker(self.engine, expire_on_commit=False)
        event.listen(self.engine, "after_cursor_execute", _note_write)
        #: The key the change log's rows are MACed with (``registry.db.audit``): set by whoever
        #: opens the database for writing (``Registry``); None refuses to append to the log.
        self.audit_key: bytes | None = None

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite database file (None for PostgreSQL or an in-memory database)."""
        database = make_url(self.url).database
        if self.dialect != "sqlite" or not database or database == ":memory:":
            return None
        return Path(database)

    def libpq_options(self) -> dict[str, Any]:
        """Connection parameters every PostgreSQL connection of this process gets (LISTEN too)."""
        return {
            "connect_timeout": max(2, math.ceil(self.connect_timeout_s)),
            # A dead peer (host gone, cable pulled) is noticed within ~30 s even on an idle connection.
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
        }

    def _configure_postgres(self) -> None:
        availability = self.availability
        options = self.libpq_options()
        statement_ms = int(self.statement_timeout_s * 1000)
        read_only = self.read_only
        round_trip_s = self.statement_timeout_s + self.ROUND_TRIP_GRACE_S if statement_ms > 0 else None
        ping_s = self.ping_timeout_s

        @event.listens_for(self.engine, "do_connect")
        def _connect(_dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> BoundedConnection:
            availability.check()
            params = {**options, **cparams}  # what the URL says wins
            if statement_ms > 0:
                params["options"] = f"{cparams.get('options', '')} -c statement_timeout={statement_ms}".strip()
            if read_only:
                params["options"] = f"{params.get('options', '')} -c default_transaction_read_only=on".strip()
            # libpq's rule: whole seconds, at least 2; 0 or less means psycopg's default (left as is).
            given_s = math.ceil(float(params.get("connect_timeout") or 0))
            connect_s = max(2, given_s) if given_s > 0 else None
            if connect_s is not None:  # psycopg's own wall-clock limit: past every move of the bound
                params["connect_timeout"] = connect_s + math.ceil(_UNWATCHED_MAX_S) + 1
            bound = _connect_bound.set(connect_s)
            try:
                conn = BoundedConnection.connect(*cargs, **params)
            except psycopg.errors.ConnectionTimeout as exc:
                availability.failed(describe(exc))
                raise
            finally:
                _connect_bound.reset(bound)
            conn.round_trip_timeout_s = round_trip_s
            record.info["fresh"] = True
            return conn

        @event.listens_for(self.engine, "checkout")
        def _ping(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
            """Pessimistic disconnect handling, with a short bound (SQLAlchemy's own pre-ping would
            wait out the full round-trip bound on a frozen server, then reconnect)."""
            availability.check()
            if record.info.pop("fresh", False):
                return  # just connected: it answered a moment ago
            granted = _round_trip_timeout(ping_s)  # less than ping_s inside a caller's shorter deadline
            try:
                with deadline(ping_s):
                    dbapi_conn.execute(";")
            except DatabaseTimeout as exc:
                if granted is not None and granted < ping_s:
                    # The caller's own deadline ran out first (a 0.8 s readiness probe on a busy
                    # box): that says nothing to other callers, so no 503s are held for them.
                    raise DatabaseUnavailable(
                        f"the database did not answer a ping within the {granted:.2f}s left of this call's deadline"
                    ) from exc
                availability.failed(describe(exc))
                raise DatabaseUnavailable(f"the database did not answer a ping within {ping_s:.1f}s") from exc
            except psycopg.Error as exc:
                if dbapi_conn.closed:  # e.g. the server restarted: reconnect (SQLAlchemy retries)
                    raise sa_exc.InvalidatePoolError(describe(exc)) from exc
                raise

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A unit of work: committed when the block ends normally, rolled back otherwise.

        A write refused because the database or its disk is full starts (or continues) a
        full-disk episode; while one lasts, a transaction that wrote and committed ends it."""
        self.availability.check()
        wrote = [False] if self.full.active else None
        marker = _wrote.set(wrote)
        try:
            with self.session_factory(info={AUDIT_KEY_INFO: self.audit_key}) as session, session.begin():
                yield session
        except Exception as exc:
            if is_full(exc):
                self.full.refused(exc)
            raise
        finally:
            _wrote.reset(marker)
        if wrote is not None and wrote[0]:
            self.full.wrote()

    def dispose(self) -> None:
        self.engine.dispose()
