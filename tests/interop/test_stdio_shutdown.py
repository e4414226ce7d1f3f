"""``mcp-registry stdio`` exits promptly when its host stops it: stdin closed, or SIGTERM.

A host runs the server as a child process and closes its stdin to stop it, and waits for it to
exit. The child once hung there now and then on PostgreSQL: the LISTEN connection coming up (and
waking the change feed) in the very loop turn in which stdin closed made Python 3.11's
``asyncio.wait_for`` drop the change feed's cancellation, and its poll loop then ran forever.

The process test starts and stops many children, two at a time, each with the exchange of the
test that first hung, and bounds each exit (and finds no shutdown stage overrunning its deadline).
The race is narrow, so it catches a regression only now and then;
``test_change_feed_stop_is_not_lost_to_a_wakeup`` forces the race in process, every time, against
the real change feed.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from registry.mcp.notifier import ChangeEvent, ChangeFeed
from registry.runtime import Registry
from tests.interop.mcp_wire import StdioProcess, article_initialize, child_env, mcp_registry_command
from tests.waiting import wait_until_async

#: Each child must be gone this soon after its host stops it (the code's own backstop is 4 s).
EXIT_BOUND_S = 5.0
#: Children per database (start-up is about a CPU second each); PostgreSQL, where LISTEN opens
#: the race, gets most of them.
ROUNDS = {"postgresql": 10, "sqlite": 4}
#: Every this many children, one is stopped by SIGTERM instead of by closing its stdin.
SIGTERM_EVERY = 4
#: Children alive at once (start-up is CPU-bound; more than the cores buys nothing).
AT_ONCE = 2
#: What the shutdown logs when a stage overran its deadline or the backstop fired.
OVERRUN_MARKS = (b"still running", b"left behind", b"did not finish", b"did not end", b"Traceback")


def _backend(database_url: str) -> str:
    return "sqlite" if database_url.startswith("sqlite") else "postgresql"


def _start(database_url: str, data_dir: Path) -> StdioProcess:
    argv = [*mcp_registry_command(), "stdio", "--database-url", database_url, "--data-dir", str(data_dir)]
    return StdioProcess(argv, child_env())


def _converse(child: StdioProcess) -> None:
    """The exchange of the test that first hung: a parse error, a request before initialize,
    initialize, an unknown method; then the host stops the child at once."""
    child.proc.stdin.write(b"{not json\n")  # type: ignore[union-attr]
    child.proc.stdin.flush()  # type: ignore[union-attr]
    assert child.receive()["error"]["code"] == -32700
    early = child.rpc({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert early is not None and early["error"]["code"] == -32600
    init = child.rpc(article_initialize("2025-11-25"))
    assert init is not None and "result" in init, init
    unknown = child.rpc({"jsonrpc": "2.0", "id": 2, "method": "no/such"})
    assert unknown is not None and unknown["error"]["code"] == -32601


def _stop_and_time(child: StdioProcess, stop: Callable[[StdioProcess], None]) -> float:
    """Stop the child the host's way and return how long it took to exit (fails past the bound)."""
    started = time.monotonic()
    stop(child)
    try:
        code = child.proc.wait(timeout=EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        child.proc.kill()
        child.proc.wait(timeout=10)
        child._err_reader.join(timeout=5)
        pytest.fail(f"the stdio child did not exit within {EXIT_BOUND_S}s; stderr: {child.stderr[-3000:]!r}")
    took = time.monotonic() - started
    child._err_reader.join(timeout=5)
    assert code == 0, f"exit status {code}; stderr: {child.stderr[-3000:]!r}"
    marks = [mark for mark in OVERRUN_MARKS if mark in child.stderr]
    assert not marks, f"shutdown overran a stage ({marks}); stderr: {child.stderr[-3000:]!r}"
    return took


def _close_stdin(child: StdioProcess) -> None:
    assert child.proc.stdin is not None
    child.proc.stdin.close()


def _sigterm(child: StdioProcess) -> None:
    child.proc.send_signal(signal.SIGTERM)


def test_stdio_exits_promptly_when_stopped(demo: Registry, database_url: str, tmp_path: Path) -> None:
    """Every child is gone well within the bound, exit status 0, no stage overran; every
    ``SIGTERM_EVERY``-th one is stopped by SIGTERM (the host's next step) rather than EOF."""
    rounds = ROUNDS[_backend(database_url)]

    def one(index: int) -> tuple[str, float]:
        child = _start(database_url, tmp_path / f"stdio-{index}")
        by_signal = index % SIGTERM_EVERY == SIGTERM_EVERY - 1
        try:
            _converse(child)
            took = _stop_and_time(child, _sigterm if by_signal else _close_stdin)
            if by_signal:
                assert b"SIGTERM, shutting down" in child.stderr, child.stderr[-3000:]
            return ("SIGTERM" if by_signal else "stdin EOF"), took
        finally:
            if child.proc.poll() is None:
                child.proc.kill()
                child.proc.wait(timeout=10)

    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        exits = list(pool.map(one, range(rounds)))
    assert len(exits) == rounds
    assert {how for how, _took in exits} == {"SIGTERM", "stdin EOF"}
    assert max(took for _how, took in exits) < EXIT_BOUND_S, exits


async def _ignore_changes(events: list[ChangeEvent], advance: Callable[[int], None]) -> None:
    return None


async def test_change_feed_stop_is_not_lost_to_a_wakeup(registry: Registry, caplog: pytest.LogCaptureFixture) -> None:
    """``ChangeFeed.stop`` cancelling the follower in the loop turn its wake-up lands (a poke, a
    NOTIFY, the LISTEN connection coming up) ends it at once; on the old code the cancellation was
    lost and the follower polled forever. The turn is hit by stopping 0..5 turns after a poke."""
    caplog.set_level(logging.WARNING, logger="registry.mcp")
    for turns in range(6):
        feed = ChangeFeed(registry.db, _ignore_changes)
        await feed.start()
        if registry.db.is_postgres:  # the wake-up of the LISTEN going first
            await wait_until_async(lambda feed=feed: feed.listening, "LISTEN to come up")
        await asyncio.sleep(0.1)  # the follower has read the change log and waits for a wake-up
        feed.poke()
        for _ in range(turns):
            await asyncio.sleep(0)
        async with asyncio.timeout(ChangeFeed.STOP_S + 5):
            await feed.stop()
        lost = [record.getMessage() for record in caplog.records if "still running" in record.getMessage()]
        assert not lost, f"stopped {turns} turn(s) after a poke: {lost}"
