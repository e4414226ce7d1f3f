"""``mcp-registry serve --workers N``: N replica processes on one host behind one port.

One core runs one Python process; the replica design (sessions and the change log in the
database, notifications through it) already lets several processes serve one catalog, so a host
with N cores runs N of them. The **supervisor** (the process the user started) migrates and seeds
once, binds the listening sockets, starts the workers and watches them; it serves no request.

Sockets: the supervisor binds one socket per worker, all on the same address with
``SO_REUSEPORT``, and each worker inherits its own (``pass_fds``). The kernel spreads new
connections evenly over the sockets (a hash of the connection's addresses). One shared socket
would let every worker's event loop race for each connection (uvloop accepts in a loop), so a
burst of connections at start lands mostly on one worker; separate sockets do not. Because the
supervisor keeps its copies open, a restarted worker takes over its predecessor's socket and the
connections queued on it, and a port already in use is reported before any worker starts.

Each worker is a full replica: its own database pool, ``McpRuntime``, change feed and snapshot.
PostgreSQL tells every worker of every change (LISTEN/NOTIFY, as for replicas on other hosts). On
SQLite there is no NOTIFY: a worker that commits a change sends one datagram to each sibling's
Unix socket (Linux abstract namespace, named by a random token per supervisor), which pokes that
sibling's change feed at once; the feed's slow poll remains the backstop.

Workers that die are restarted: at most ``RESTARTS_ALLOWED`` within ``RESTART_WINDOW_S``, each one
logged; past that the supervisor stops the others and exits 1 (a worker that cannot stay up, a
broken database or configuration, is better reported than restarted forever). SIGTERM or SIGINT to
the supervisor is passed on to every worker as SIGTERM (each drains its streams and shuts down as
a single process does); one still running after ``SHUTDOWN_BUDGET_S`` is killed and the exit code
is 1, else 0.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType

log = logging.getLogger("registry.workers")

#: The most workers ``--workers`` accepts (more processes than cores only add contention).
MAX_WORKERS = 64
#: Worker restarts allowed within ``RESTART_WINDOW_S`` before the supervisor gives up (exit 1).
RESTARTS_ALLOWED = 5
RESTART_WINDOW_S = 60.0
#: From SIGTERM to SIGKILL for a worker: uvicorn's graceful shutdown (``REGISTRY_SHUTDOWN_GRACE_S``,
#: 10 s by default) plus this margin for the runtime's stop.
SHUTDOWN_MARGIN_S = 5.0
SHUTDOWN_BUDGET_S = 10.0 + SHUTDOWN_MARGIN_S
#: The environment variable that makes ``serve`` a worker (set by the supervisor, never by users).
WORKER_ENV = "REGISTRY_INTERNAL_WORKER"
_LISTEN_BACKLOG = 2048
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class WorkerSlot:
    """What a worker is told by its supervisor: its number, the inherited socket, its siblings."""

    index: int
    count: int
    fd: int
    supervisor_pid: int
    #: Names this supervisor's sibling sockets (SQLite change pokes).
    token: str

    def encode(self) -> str:
        return f"{self.index}:{self.count}:{self.fd}:{self.supervisor_pid}:{self.token}"

    @classmethod
    def from_env(cls) -> WorkerSlot | None:
        raw = os.environ.get(WORKER_ENV)
        if not raw:
            return None
        index, count, fd, pid, token = raw.split(":")
        return cls(int(index), int(count), int(fd), int(pid), token)

    def socket(self) -> socket.socket:
        return socket.socket(fileno=self.fd)

    def die_with_supervisor(self) -> None:
        """SIGTERM this worker when the supervisor dies, even by SIGKILL (Linux), so no orphan
        keeps serving; and exit now if it is already gone."""
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != self.supervisor_pid:
            raise SystemExit(1)


def _sibling_address(token: str, index: int) -> str:
    return f"\0mcp-registry-{token}-{index}"


class SiblingPokes:
    """SQLite's stand-in for NOTIFY between workers of one supervisor: a datagram per change.

    The datagram carries nothing (the receiver reads the change log after its own position, so a
    lost or duplicated poke changes nothing but latency); sending never blocks (a full buffer means
    the sibling has pokes enough already).
    """

    def __init__(self, slot: WorkerSlot) -> None:
        self._slot = slot
        self._inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._inbox.bind(_sibling_address(slot.token, slot.index))
        self._outbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._outbox.setblocking(False)
        self._siblings = [_sibling_address(slot.token, i) for i in range(slot.count) if i != slot.index]

    def announce(self, _change_id: int) -> None:
        """Called after each change this worker commits (``CatalogService.on_change``)."""
        for address in self._siblings:
            with contextlib.suppress(OSError):  # a sibling restarting, or its buffer full
                self._outbox.sendto(b".", address)

    def listen(self, poke: Callable[[], None]) -> None:
        """Call ``poke`` (thread-safe) for every datagram, from a daemon thread."""

        def receive() -> None:
            while True:
                try:
                    self._inbox.recv(16)
                except OSError:
                    return
                poke()

        threading.Thread(target=receive, name="sibling-pokes", daemon=True).start()


def listening_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` sockets listening on one address (``SO_REUSEPORT``), inheritable by workers.
    Raises ``OSError`` when the address cannot be bound (in use, not local)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _name, address = infos[0]
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)
            if address[1] == 0:  # an ephemeral port: the others join the first one's
                address = (address[0], sock.getsockname()[1], *address[2:])
            sock.listen(_LISTEN_BACKLOG)
            sock.set_inheritable(True)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Supervisor:
    """Starts the workers, restarts one that dies (bounded), stops them all on SIGTERM/SIGINT."""

    def __init__(
        self, command: Sequence[str], sockets: list[socket.socket], *, shutdown_budget_s: float = SHUTDOWN_BUDGET_S
    ) -> None:
        self.shutdown_budget_s = shutdown_budget_s
        #: The worker's command line (``python -m registry serve ...``); the slot comes by environment.
        self.command = list(command)
        self.sockets = sockets
        self.token = secrets.token_hex(8)
        self.workers: list[subprocess.Popen[bytes]] = []
        self._stopping: int | None = None

    def _spawn(self, index: int) -> subprocess.Popen[bytes]:
        fd = self.sockets[index].fileno()
        slot = WorkerSlot(index, len(self.sockets), fd, os.getpid(), self.token)
        env = {**os.environ, WORKER_ENV: slot.encode()}
        # Its own process group: a terminal's Ctrl-C reaches the supervisor only, which passes one
        # SIGTERM on (a second signal would make uvicorn skip its graceful shutdown).
        proc = subprocess.Popen(self.command, env=env, pass_fds=[fd], process_group=0)
        log.info("worker %d started (pid %d)", index, proc.pid)
        return proc

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self._stopping is None:
            self._stopping = signum

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        restarts: deque[float] = deque()
        code = 0
        try:
            self.workers = [self._spawn(i) for i in range(len(self.sockets))]
            while self._stopping is None:
                time.sleep(0.1)
                for index, proc in enumerate(self.workers):
                    status = proc.poll()
                    if status is None or self._stopping is not None:
                        continue
                    now = time.monotonic()
                    while restarts and now - restarts[0] > RESTART_WINDOW_S:
                        restarts.popleft()
                    if len(restarts) >= RESTARTS_ALLOWED:
                        log.error(
                            "worker %d (pid %d) exited with %s; %d restarts within %.0fs already, giving up",
                            index,
                            proc.pid,
                            status,
                            len(restarts),
                            RESTART_WINDOW_S,
                        )
                        code = 1
                        self._stopping = signal.SIGTERM
                        break
                    restarts.append(now)
                    log.warning(
                        "worker %d (pid %d) exited with %s; restarting it (restart %d of %d allowed within %.0fs)",
                        index,
                        proc.pid,
                        status,
                        len(restarts),
                        RESTARTS_ALLOWED,
                        RESTART_WINDOW_S,
                    )
                    self.workers[index] = self._spawn(index)
            if code == 0:
                log.info("%s: stopping %d workers", signal.Signals(self._stopping).name, len(self.workers))
        finally:
            if not self.stop_workers(self.shutdown_budget_s):
                code = 1
            for sock in self.sockets:
                sock.close()
        return code

    def stop_workers(self, budget_s: float = SHUTDOWN_BUDGET_S) -> bool:
        """SIGTERM every worker, wait ``budget_s`` for all, SIGKILL the rest; True if none needed it."""
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + budget_s
        clean = True
        for index, proc in enumerate(self.workers):
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("worker %d (pid %d) still running %.0fs after SIGTERM; killing it", index, proc.pid, budget_s)
                proc.kill()
                proc.wait()
                clean = False
        return clean


def worker_command(
    *, host: str, port: int, log_level: str, access_log: bool, database_url: str | None, data_dir: str | None
) -> list[str]:
    """``python -m registry serve`` with the supervisor's own options (the environment is inherited)."""
    command = [sys.executable, "-m", "registry", "serve", "--host", host, "--port", str(port)]
    command += ["--log-level", log_level, "--workers", "1"]
    if access_log:
        command.append("--access-log")
    if database_url:
        command += ["--database-url", database_url]
    if data_dir:
        command += ["--data-dir", data_dir]
    return command
