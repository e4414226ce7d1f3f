"""What a piece of work cost, measured so that a loaded machine does not change the answer.

A test that means "refused quickly" or "refused before it allocated" should not time the work
with a wall clock: on a shared machine the wall clock counts other processes' turns too. The
CPU time of the calling thread counts only the work itself, and ``tracemalloc``'s peak counts
only what Python allocated, so the bounds below can be tight and still never flake.
"""

from __future__ import annotations

import os
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Cost:
    """Filled in when the ``with`` block ends."""

    cpu_seconds: float = 0.0
    peak_bytes: int = 0


@contextmanager
def measured(*, memory: bool = False) -> Iterator[Cost]:
    """CPU time of this thread spent in the block and, with ``memory``, the peak of what Python
    allocated in it above what was allocated when it began (``tracemalloc`` slows allocation, so
    only when asked)."""
    cost = Cost()
    if memory:
        tracemalloc.start()
        tracemalloc.reset_peak()
        baseline = tracemalloc.get_traced_memory()[0]
    started = time.thread_time()
    try:
        yield cost
    finally:
        cost.cpu_seconds = time.thread_time() - started
        if memory:
            cost.peak_bytes = tracemalloc.get_traced_memory()[1] - baseline
            tracemalloc.stop()


def _cpu_seconds(stat_path: str) -> float:
    with open(stat_path, encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    # After the command name: state is field 3, utime 14 and stime 15 (1-based, man 5 proc).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU time another process (a server under test) has spent so far, from
    /proc: the server's share of a request, whatever else the machine is doing."""
    return _cpu_seconds(f"/proc/{pid}/stat")


def main_thread_cpu_seconds(pid: int) -> float:
    """CPU time of a process's main thread alone: a server's event loop (uvicorn runs it there),
    so what it did itself, apart from the worker threads that take the heavy work."""
    return _cpu_seconds(f"/proc/{pid}/task/{pid}/stat")


@contextmanager
def measured_in(pid: int) -> Iterator[Cost]:
    """``measured`` for another process: the CPU time it spent while the block ran (the block's
    requests, and whatever else it served meanwhile: keep probes light)."""
    cost = Cost()
    started = process_cpu_seconds(pid)
    try:
        yield cost
    finally:
        cost.cpu_seconds = process_cpu_seconds(pid) - started
