"""The serving process's side of the exporter process: a bounded queue of span records, a writer
thread that ships them in batches over a pipe, and the child process itself.

Why a child process: the OTLP encoder costs ~60 µs per span and holds the GIL while it runs, so in
the serving process it stalls the event loop; in a process of its own it uses the other core.

The event loop only appends to a ``deque`` (thread-safe, no lock): :meth:`PipeOutlet.put` never
blocks. Past ``queue_size`` records waiting (``OTEL_BSP_MAX_QUEUE_SIZE``, 2048 by default) a record
is dropped and counted (:attr:`PipeOutlet.dropped`; logged once): a collector or an exporter that
cannot keep up loses spans, never requests. The writer thread wakes every
:data:`INTERVAL_S`, encodes what is queued with orjson (a frame: 4-byte big-endian length, then a
JSON array of records) and writes it to the child's stdin; a blocking write stalls that thread
only. If the child dies, that is logged and every later record is dropped and counted.

The child (``python -m registry.tracing.exporter``) exits once its stdin closes, after exporting
what it had: :meth:`PipeOutlet.close` closes it at shutdown, and so does the kernel if this
process dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence

import orjson

from registry.tracing.records import Record

log = logging.getLogger("registry.tracing")

#: How often the writer thread ships what is queued (seconds).
INTERVAL_S = 0.05
#: Records per frame at most.
MAX_BATCH = 512
#: The pipe's buffer (Linux F_SETPIPE_SZ; the default 64 KiB holds ~100 records).
PIPE_BYTES = 1 << 20
_F_SETPIPE_SZ = 1031


class PipeOutlet:
    """Records to the exporter process (see the module's docstring)."""

    def __init__(self, command: Sequence[str], *, queue_size: int, env: dict[str, str] | None = None) -> None:
        self.command = list(command)
        self.env = env
        self.queue_size = queue_size
        self._bound = queue_size
        self._queue: deque[Record] = deque()
        #: Records dropped: the queue was full, or the exporter process had died.
        self.dropped = 0
        #: Records written to the pipe.
        self.shipped = 0
        #: The exporter process has exited (or could not be written to): records are dropped.
        self.dead = False
        self._warned = False
        self._process: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._idle = threading.Condition()

    # ------------------------------------------------------------------ the event loop's side
    def put(self, record: Record) -> None:
        if len(self._queue) < self._bound:
            self._queue.append(record)
        else:
            self._drop(1)

    def _drop(self, count: int) -> None:
        self.dropped += count
        if not self._warned:
            self._warned = True
            if self._bound:
                log.warning(
                    "tracing: %d span records wait for the exporter process (OTEL_BSP_MAX_QUEUE_SIZE); dropping "
                    "and counting the excess (logged once)",
                    self.queue_size,
                )

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._process is not None or self.dead:
            return
        # Its stdout is this process's stderr: under ``stdio`` stdout is the JSON-RPC channel, and the
        # console exporter must not write spans into it.
        try:
            self._process = subprocess.Popen(
                self.command, stdin=subprocess.PIPE, stdout=sys.stderr.fileno(), env=self.env, close_fds=True
            )
        except OSError:  # serving goes on without spans, as when the exporter process dies
            log.exception("tracing: the exporter process could not be started; span records are dropped")
            self._bound = 0
            self.dead = True
            self._queue.clear()
            return
        assert self._process.stdin is not None
        # Not Linux, or above /proc/sys/fs/pipe-max-size: the default buffer.
        with contextlib.suppress(OSError):
            fcntl.fcntl(self._process.stdin.fileno(), _F_SETPIPE_SZ, PIPE_BYTES)
        self._thread = threading.Thread(target=self._run, name="tracing-pipe", daemon=True)
        self._thread.start()
        log.info("tracing: exporter process %d started", self._process.pid)

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until what is queued now has been written to the pipe (not exported yet)."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._queue and self._bound and self._thread is not None and self._thread.is_alive():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(min(remaining, INTERVAL_S))
        return not self._queue

    def close(self, timeout_s: float = 30.0) -> None:
        """Ship what is queued, close the pipe and wait for the child to export it and exit."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        process = self._process
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("tracing: exporter process %d did not exit within %.0f s; killed", process.pid, timeout_s)
            process.kill()
            process.wait()
        (log.warning if self.dropped else log.info)(
            "tracing: %d span records shipped to the exporter process, %d dropped", self.shipped, self.dropped
        )

    # ------------------------------------------------------------------ the writer thread
    def _run(self) -> None:
        process = self._process
        assert process is not None and process.stdin is not None
        fd = process.stdin.fileno()
        queue = self._queue
        while True:
            stopping = self._stopping.wait(INTERVAL_S)
            while queue:
                batch = [queue.popleft() for _ in range(min(MAX_BATCH, len(queue)))]
                if not self._write(fd, batch, process):
                    self._dead(process)
                    return
            with self._idle:
                self._idle.notify_all()
            if stopping:
                return
            if process.poll() is not None:
                self._dead(process)
                return

    def _write(self, fd: int, batch: list[Record], process: subprocess.Popen[bytes]) -> bool:
        data = orjson.dumps(batch, default=str)
        frame = memoryview(len(data).to_bytes(4, "big") + data)
        try:
            while frame:
                frame = frame[os.write(fd, frame) :]
        except OSError:  # EPIPE: the child is gone
            self._drop(len(batch))
            return False
        self.shipped += len(batch)
        return True

    def _dead(self, process: subprocess.Popen[bytes]) -> None:
        """The child is gone: drop everything from now on, never block."""
        self._bound = 0
        self.dead = True
        dropped = len(self._queue)
        self._queue.clear()
        self.dropped += dropped
        log.error(
            "tracing: the exporter process %d exited (%s); span records are dropped from now on",
            process.pid,
            process.poll(),
        )
        with self._idle:
            self._idle.notify_all()
