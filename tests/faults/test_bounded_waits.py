"""``registry.db.engine._bounded``: the bound on a PostgreSQL round trip is on the server's silence,
not on this process's scheduling, driven here step by step with a scripted clock and a stand-in
for psycopg's wait protocol (each look at the socket is a value sent to the generator: 0 for
"nothing ready", else what is ready)."""

from __future__ import annotations

import types
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from registry.db import engine
from registry.db.engine import DatabaseTimeout, _bounded

READ = 1  # psycopg's Wait.R / Ready.R
NOTHING = 0  # psycopg's Ready.NONE: a look that found nothing


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    clock = Clock()
    monkeypatch.setattr(engine, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    yield clock


def answer_after(reads: int) -> Generator[int, int, str]:
    """A round trip whose answer takes ``reads`` looks that find something."""
    got = 0
    while got < reads:
        ready = yield READ
        if ready:
            got += 1
    return "answer"


def run(clock: Clock, bound: float, looks: list[tuple[float, int]], reads: int = 1) -> str:
    """Drive one bounded round trip: each look at (seconds after the start, what was ready)."""
    start = clock.now
    waiting = _bounded(answer_after(reads), start + bound, bound)
    next(waiting)
    for at, ready in looks:
        clock.now = start + at
        try:
            waiting.send(ready)
        except StopIteration as done:
            return str(done.value)
    raise AssertionError("the round trip neither ended nor timed out")


def silent(until: float, every: float = 0.1) -> list[tuple[float, int]]:
    """Looks that find nothing, every ``every`` seconds, while the process runs."""
    return [(round(every * n, 3), NOTHING) for n in range(1, int(until / every) + 1)]


def test_an_answer_read_late_after_a_pause_is_taken(clock: Clock) -> None:
    """The process stopped for 10 s with the answer already there: the next look takes it."""
    assert run(clock, 2.0, [(10.0, READ)]) == "answer"


def test_an_answer_in_several_reads_after_a_pause_is_taken(clock: Clock) -> None:
    """The pause moves the bound on, so the rest of the answer is read too."""
    assert run(clock, 2.0, [(0.1, READ), (9.0, READ), (9.01, READ)], reads=3) == "answer"


def test_a_silent_server_times_out_at_its_bound_while_the_process_runs(clock: Clock) -> None:
    with pytest.raises(DatabaseTimeout, match=r"within 2\.0s"):
        run(clock, 2.0, silent(5.0))


def test_an_answer_found_by_the_first_look_past_the_bound_is_taken(clock: Clock) -> None:
    """A short stall (under the gap that counts as a pause) across the bound: the look before was
    in time, so the answer may have come in time."""
    assert run(clock, 0.3, [(0.1, NOTHING), (0.2, NOTHING), (0.55, READ)]) == "answer"


def test_past_the_bound_only_that_first_look_is_honoured(clock: Clock) -> None:
    """An answer still arriving piece by piece after the bound is given up on (no endless trickle)."""
    with pytest.raises(DatabaseTimeout):
        run(clock, 0.3, [(0.2, READ), (0.35, READ), (0.45, READ), (0.5, READ)], reads=4)


def test_a_zero_bound_reads_nothing(clock: Clock) -> None:
    with pytest.raises(DatabaseTimeout):
        run(clock, 0.0, [(0.001, READ)])


def test_a_process_starved_on_every_look_still_gives_up_on_a_silent_server(clock: Clock) -> None:
    """Every look a second after the last (each gap moves the bound on), nothing ever ready: the
    moves stop at _UNWATCHED_MAX_S, so the wait ends after the bound plus that."""
    looks = [(float(n), NOTHING) for n in range(1, 100)]
    with pytest.raises(DatabaseTimeout):
        run(clock, 2.0, looks)
    assert 2.0 + engine._UNWATCHED_MAX_S <= clock.now - 1000.0 <= 2.0 + engine._UNWATCHED_MAX_S + 1.0


def test_a_wait_for_nothing_ready_keeps_going_within_the_bound(clock: Clock) -> None:
    assert run(clock, 2.0, [*silent(1.9), (1.95, READ)]) == "answer"


def test_the_bound_holds_with_any_scheduling(clock: Clock) -> None:
    """Whatever the pauses, a wait ends: within the bound plus every unwatched gap, capped."""
    looks: list[tuple[float, Any]] = [(0.1, NOTHING), (3.0, NOTHING), *[(3.0 + 0.1 * n, NOTHING) for n in range(1, 40)]]
    with pytest.raises(DatabaseTimeout):
        run(clock, 2.0, looks)
    # 2 s of bound + the 2.9 s gap: given up on at the first look at or past 4.9 s.
    assert 4.9 - 1e-9 <= clock.now - 1000.0 <= 5.0 + 1e-9
