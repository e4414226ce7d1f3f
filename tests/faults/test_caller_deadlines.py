"""A caller's own short deadline running out is that caller's failure, not an outage.

The pool pings a reused PostgreSQL connection before handing it out; a ping that times out
marks the database unavailable for a moment (AVAILABILITY_HOLD_S), so the callers right after
are answered 503 at once instead of each waiting out a ping of their own. Once, in CI, a 0.8 s
readiness probe at start-up ran out of time on a loaded box inside that ping, and the admin API
then answered 503 to a healthy database's first request.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from sqlalchemy import text

from registry.db import engine
from registry.db.engine import Database, DatabaseUnavailable, deadline, is_unavailable


@pytest.fixture
def postgres(postgres_url: str) -> Iterator[Database]:
    db = Database(postgres_url, ping_timeout_s=2.0)
    try:
        yield db
    finally:
        db.dispose()


def select_one(db: Database) -> int:
    with db.session() as session:
        return int(session.execute(text("SELECT 1")).scalar_one())


def test_a_ping_cut_short_by_the_callers_deadline_holds_no_503s_for_others(postgres: Database) -> None:
    assert select_one(postgres) == 1  # leaves a pooled connection, which the next checkout pings
    with pytest.raises(DatabaseUnavailable, match="left of this call's deadline"), deadline(0.0):
        select_one(postgres)
    # The database is fine: the next caller is served, not told "not answering; retrying shortly".
    assert select_one(postgres) == 1


def test_a_ping_that_times_out_on_its_own_bound_is_remembered(postgres: Database) -> None:
    """The other side: with the full ping bound spent, the next callers get 503 at once."""
    db = Database(postgres.url, ping_timeout_s=0.0)  # every ping of a reused connection times out
    try:
        assert select_one(db) == 1
        with pytest.raises(DatabaseUnavailable, match=r"did not answer a ping within 0\.0s"):
            select_one(db)
        with pytest.raises(DatabaseUnavailable, match="not answering"):
            select_one(db)
    finally:
        db.dispose()


def _hold_the_interpreter(go: threading.Event, holding: threading.Event, seconds: float) -> None:
    """Once ``go`` is set, keep this interpreter busy for ``seconds`` without letting any other
    thread run (with a long switch interval, the lock is only given up when this thread ends)."""
    go.wait()
    holding.set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_an_answer_read_late_because_this_process_was_not_running_is_no_outage(
    postgres: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ping the database answered at once, read 2.5 s later because this process did not run
    (stopped, starved of CPU, or another thread holding the interpreter), is an answer. It was
    taken for a dead database: the connection was dropped and every caller for the next
    AVAILABILITY_HOLD_S was answered 503 (seen in benchmarks, where servers not under load are
    paused with SIGSTOP, as "initialize -> 503 the catalog is temporarily unavailable")."""
    db = Database(postgres.url, ping_timeout_s=1.0)
    go, holding = threading.Event(), threading.Event()
    real_bounded = engine._bounded

    def bounded_then_held(gen: Generator[Any, Any, Any], limit: float, seconds: float) -> Generator[Any, Any, Any]:
        """The first round trip once armed: its request is sent, then this thread lets the hog
        run and waits for it to hold the interpreter (it gets it back when the hog ends, 2.5 s
        later), and only then looks for the answer that came meanwhile."""

        def sent_then_held() -> Generator[Any, Any, Any]:
            state = next(gen)
            go.set()
            holding.wait()
            while True:
                ready = yield state
                try:
                    state = gen.send(ready)
                except StopIteration as done:
                    return done.value

        return real_bounded(sent_then_held() if armed and not go.is_set() else gen, limit, seconds)

    switch_interval = sys.getswitchinterval()
    armed = False
    try:
        assert select_one(db) == 1  # a pooled connection, which the next checkout pings
        monkeypatch.setattr(engine, "_bounded", bounded_then_held)
        hog = threading.Thread(target=_hold_the_interpreter, args=(go, holding, 2.5), daemon=True)
        hog.start()
        sys.setswitchinterval(30.0)  # the hog, once it runs, keeps the interpreter until it ends
        armed = True
        started = time.monotonic()
        assert select_one(db) == 1  # its first round trip is the ping
        waited = time.monotonic() - started
        hog.join()
        assert go.is_set() and waited >= 2.0, f"the answer was read after {waited:.2f}s: the hog did not hold it up"
        assert select_one(db) == 1  # and nothing is remembered as an outage
    finally:
        sys.setswitchinterval(switch_interval)
        db.dispose()


def test_a_server_that_does_not_answer_in_time_is_still_one(postgres: Database) -> None:
    """The other side: a wait in which this process was running and nothing came still ends at the bound."""
    assert select_one(postgres) == 1
    started = time.monotonic()
    with pytest.raises(Exception) as raised, deadline(0.3), postgres.session() as session:
        session.execute(text("SELECT pg_sleep(5)"))
    assert is_unavailable(raised.value), raised.value
    # Unbounded, the statement would run its 5 s; the 0.3 s bound has 3.7 s of room for a loaded box.
    assert time.monotonic() - started < 4, "the wait outlasted its bound"
    assert select_one(postgres) == 1
