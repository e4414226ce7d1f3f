"""A full disk: telling it from other database errors, and logging it once per episode.

A database whose disk (or whose own size limit) is full still answers reads and refuses every
write that needs more room: SQLite's SQLITE_FULL ("database or disk is full", also raised by a
database at ``PRAGMA max_page_count``), PostgreSQL's disk_full (SQLSTATE 53100, "could not extend
file"). That lasts until an operator frees space, so a client is told exactly that (503, "database
or disk is full"), and the log gets one line when writes start failing and one when a write
succeeds again: during the episode every write fails alike, and a traceback for each buried the
one fact that mattered.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

import psycopg
from sqlalchemy import exc as sa_exc

#: What a full disk is called in answers and logs (SQLite's own words for SQLITE_FULL).
DISK_FULL = "database or disk is full"
#: Seconds a client is told to wait (Retry-After) before retrying a write refused as full: it takes
#: an operator to free space, so retrying at once only adds load.
FULL_RETRY_AFTER_S = 30
#: PostgreSQL's SQLSTATE for a full disk (class 53, insufficient resources).
_PG_DISK_FULL = "53100"

log = logging.getLogger("registry.db")


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` is the database refusing a write because it or its disk is full."""
    if isinstance(exc, sa_exc.DBAPIError) and isinstance(exc.orig, BaseException):
        exc = exc.orig
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        return (code is not None and code & 0xFF == sqlite3.SQLITE_FULL) or DISK_FULL in str(exc).lower()
    if isinstance(exc, psycopg.Error):
        return exc.sqlstate == _PG_DISK_FULL
    return False


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, sa_exc.DBAPIError) and isinstance(exc.orig, BaseException):
        exc = exc.orig
    return (str(exc).strip().splitlines() or [""])[0][:200]


class FullEpisodes:
    """One database's full-disk episodes: ``refused`` for each write refused as full (the first
    of an episode logs it), ``wrote`` for each write committed (the first after an episode logs
    its end, with how long it lasted and how many writes were refused). Thread-safe: writes fail
    and succeed on worker threads."""

    def __init__(self, logger: logging.Logger = log) -> None:
        self._log = logger
        self._lock = threading.Lock()
        self._since: float | None = None
        self._refused = 0

    @property
    def active(self) -> bool:
        """Whether writes are being refused as full (no write has succeeded since)."""
        return self._since is not None

    def refused(self, exc: BaseException) -> None:
        with self._lock:
            self._refused += 1
            if self._since is not None:
                return
            self._since = time.monotonic()
        said = _first_line(exc)
        self._log.error(
            "%s%s: writes are refused (503) until space is freed; reads keep being served",
            DISK_FULL,
            "" if said.lower() == DISK_FULL else f" ({said})",
        )

    def wrote(self) -> None:
        with self._lock:
            if self._since is None:
                return
            lasted, refused = time.monotonic() - self._since, self._refused
            self._since, self._refused = None, 0
        self._log.warning(
            "writes work again: the database took a write after %.0f s full (%d writes refused meanwhile)",
            lasted,
            refused,
        )
