"""A private PostgreSQL cluster for fault tests: stopped, frozen and restarted at will.

Fault tests must never touch the machine's shared PostgreSQL, so each test module that injects
database faults runs its own cluster from the installed binaries: ``initdb`` into a temporary
folder, ``postgres`` on a free loopback port, its socket in that folder. The server runs as the
``postgres`` user (``initdb`` refuses root); when the tests run as root the processes are started
with that user's uid.

``freeze`` sends SIGSTOP to the postmaster and every backend: the kernel still accepts TCP
connections and acknowledges data, but nothing answers, which is what a hung database host or a
stalled storage layer looks like to a client.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.serve_process import free_port
from tests.waiting import wait_until

PG_USER = "postgres"


def _bin_dir() -> Path | None:
    """The newest installed server binaries (``/usr/lib/postgresql/<major>/bin``), or ``PG_BIN``."""
    explicit = os.environ.get("PG_BIN")
    if explicit:
        return Path(explicit) if (Path(explicit) / "postgres").exists() else None
    found = sorted(
        (Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin") if (Path(p) / "postgres").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1]
    on_path = shutil.which("postgres")
    return Path(on_path).parent if on_path else None


def unavailable_reason() -> str | None:
    """Why a private cluster cannot run here (None: it can)."""
    if _bin_dir() is None:
        return "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin or PG_BIN)"
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        return f"no {PG_USER!r} user to run a private PostgreSQL cluster as"
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != PG_USER:
        return f"a private PostgreSQL cluster needs root (to run as {PG_USER!r}) or to run as {PG_USER!r}"
    return None


def skip_unless_available() -> None:
    """Skip (fail under CI=true) when this machine cannot run a private cluster."""
    reason = unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _children(pid: int) -> list[int]:
    """Every process whose parent is ``pid`` (the postmaster's backends and auxiliary processes)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                # pid (comm) state ppid ...; comm may contain spaces, so split after the last ')'.
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


class PgCluster:
    """One private cluster: ``start``, ``stop``, ``freeze``, ``resume``, ``cleanup``."""

    def __init__(self) -> None:
        bin_dir = _bin_dir()
        assert bin_dir is not None, unavailable_reason()
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="pgfault-"))
        self.data_dir = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log_path = self.root / "postgres.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.frozen: list[int] = []
        self._initialised = False
        user = pwd.getpwnam(PG_USER)
        self._as_postgres = os.geteuid() == 0
        self._uid, self._gid = user.pw_uid, user.pw_gid
        if self._as_postgres:
            os.chown(self.root, self._uid, self._gid)
        self.socket_dir.mkdir()
        if self._as_postgres:
            os.chown(self.socket_dir, self._uid, self._gid)

    # -- running things as the postgres user -----------------------------------------------
    def _popen(self, argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        if self._as_postgres:
            kwargs.update(user=self._uid, group=self._gid, extra_groups=[])
        return subprocess.Popen(argv, cwd=str(self.root), **kwargs)  # type: ignore[call-overload,no-any-return]

    def _run(self, argv: list[str], *, timeout: float = 120.0) -> None:
        proc = self._popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out, _ = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed ({proc.returncode}):\n{out.decode(errors='replace')[-3000:]}")

    # -- URLs -------------------------------------------------------------------------------
    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A fresh database on this cluster; returns its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def query(self, sql: str, database: str = "postgres") -> list[tuple[object, ...]]:
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True, connect_timeout=5) as conn:
            return list(conn.execute(sql).fetchall())

    # -- lifecycle --------------------------------------------------------------------------
    def start(self, *, timeout: float = 60.0) -> PgCluster:
        if not self._initialised:
            self._run([str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", PG_USER, "-A", "trust", "-N"])
            self._initialised = True
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed right after
        try:
            self.proc = self._popen(
                [
                    str(self.bin_dir / "postgres"),
                    "-D",
                    str(self.data_dir),
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.socket_dir),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    # No fsync (a test cluster), but every commit reaches the OS before it is
                    # acknowledged: an immediate (crash-like) stop must not lose what clients saw committed.
                    "-c",
                    "fsync=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "shared_buffers=16MB",
                    "-c",
                    "max_connections=100",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            log.close()
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}:\n{self.log_tail()}")
            probe = subprocess.run(
                [str(self.bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-t", "1"],
                capture_output=True,
            )
            return probe.returncode == 0

        wait_until(ready, lambda: f"postgres to become ready:\n{self.log_tail()}", timeout=timeout, interval=0.1)

    def stop(self, *, mode: str = "fast", timeout: float = 30.0) -> None:
        """Shut the server down: ``fast`` (SIGINT: backends are terminated, clients see the
        connection close) or ``immediate`` (SIGQUIT: no checkpoint, like a crash)."""
        self.resume()
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGQUIT if mode == "immediate" else signal.SIGINT)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def freeze(self) -> None:
        """SIGSTOP the postmaster first (so it forks nothing new), then all its children."""
        assert self.proc is not None and self.proc.poll() is None, "the cluster is not running"
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.frozen = [self.proc.pid]
        for child in _children(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGSTOP)
                self.frozen.append(child)

    def resume(self) -> None:
        for pid in reversed(self.frozen):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.frozen = []

    def cleanup(self) -> None:
        try:
            self.stop(mode="immediate", timeout=10)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_bytes()[-chars:].decode("utf-8", "replace")
        except OSError:
            return ""

    def __enter__(self) -> PgCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
