"""A connect to PostgreSQL is bounded on the server's silence, not on this process's scheduling.

psycopg's own connect timeout counts wall time: a process that stopped or was starved of CPU
while a healthy server answered its connect gave up on it, took the database for dead and
answered 503 for ``AVAILABILITY_HOLD_S``. Here the stall is a look at the socket that returns
three seconds late (``time.sleep`` in psycopg's selector, with the server's answer waiting),
against a connect timeout of two; and a server that never answers is still given up on.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg.waiting
import pytest
from sqlalchemy import text

from registry.db import engine
from registry.db.engine import Database, is_unavailable


def select_one(db: Database) -> int:
    with db.session() as session:
        return int(session.execute(text("SELECT 1")).scalar_one())


def test_a_connect_read_late_after_a_stall_is_not_taken_for_a_dead_database(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stalled: list[float] = []

    class StallingOnce(psycopg.waiting.DefaultSelector):  # type: ignore[misc,name-defined]
        def select(self, timeout: float | None = None) -> Any:
            if not stalled:  # the process does not run for 3 s: the server's answer waits for it
                stalled.append(time.monotonic())
                time.sleep(3.0)
            return super().select(timeout)

    monkeypatch.setattr(psycopg.waiting, "DefaultSelector", StallingOnce)
    db = Database(postgres_url, connect_timeout_s=2.0)
    try:
        assert select_one(db) == 1  # before: ConnectionTimeout, then 503s for AVAILABILITY_HOLD_S
        assert stalled, "the connect never looked at its socket: the stall was not exercised"
        assert select_one(db) == 1
    finally:
        db.dispose()


@pytest.fixture
def silent_server() -> Iterator[list[socket.socket]]:
    """A TCP port that accepts connections and never says a word (a frozen server): its listening
    socket first, then every connection it accepted."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = [listener]
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True, name="silent-server")
    thread.start()
    try:
        yield accepted
    finally:
        stop.set()
        thread.join(5)
        for sock in accepted:
            sock.close()


def test_a_server_that_never_answers_a_connect_is_still_given_up_on(
    silent_server: list[socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The failure is remembered for a while; long enough here that a stalled test box cannot
    # outlast it between the two calls.
    monkeypatch.setattr(engine._Availability, "HOLD_S", 60.0)
    port = silent_server[0].getsockname()[1]
    db = Database(f"postgresql://nobody@127.0.0.1:{port}/none", connect_timeout_s=2.0)
    try:
        started = time.monotonic()
        with pytest.raises(Exception) as raised:
            select_one(db)
        waited = time.monotonic() - started
        assert is_unavailable(raised.value) and "did not answer within 2.0s" in str(raised.value), raised.value
        # At its own bound, not at psycopg's outer one (the bound plus every move a stall may make).
        assert 1.9 <= waited < 15.0, waited
        # Remembered: the next caller is told at once instead of waiting out a connect of its own
        # (the message is the remembered one, and the silent server saw no new connection).
        connections = len(silent_server) - 1
        with pytest.raises(Exception) as raised:
            select_one(db)
        assert is_unavailable(raised.value) and "not answering" in str(raised.value), raised.value
        assert len(silent_server) - 1 == connections, "the second caller connected again"
    finally:
        db.dispose()
