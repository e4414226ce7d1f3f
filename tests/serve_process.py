"""The one way tests and benchmarks start a server as a real process, ``mcp-registry serve`` above all.

A separate process (not a thread in the test runner) is what lets a test read the server's own
RSS, freeze it with SIGSTOP, kill it with -9, or start several replicas on one database.
Benchmarks import this file too (they put the repository root on ``sys.path``) and start their
other servers (the SDK's peer, a webhook echo) as ``ManagedProcess``: one way to start, wait for
and stop any server process.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Self

import httpx

from tests.http import TLS
from tests.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (Linux ``/proc``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def mcp_registry_command(python: str = sys.executable) -> list[str]:
    """The installed ``mcp-registry`` console script next to ``python``, else ``python -m registry``:
    what a user runs, for tests that start the server the way a user does."""
    script = Path(python).parent / "mcp-registry"
    return [str(script)] if script.exists() else [python, "-m", "registry"]


def upgrade_database(
    database_url: str,
    *,
    command: list[str] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 300.0,
) -> None:
    """Migrate ``database_url`` to the newest schema with the CLI, as an operator does before
    starting replicas on a fresh database (``command``: another checkout's, for an A/B run)."""
    done = subprocess.run(
        [*(command or mcp_registry_command()), "db", "upgrade", "--database-url", database_url],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"db upgrade failed ({done.returncode}): {done.stdout}\n{done.stderr}")


def process_secret_key() -> str:
    """The REGISTRY_SECRET_KEY a ``ServerProcess`` gets (a CLI writing to its database needs it too)."""
    return os.environ.get("REGISTRY_TEST_SECRET_KEY", "test-process-secret-key")


class ManagedProcess:
    """Any server process on a loopback port: start it, wait until it answers, stop it.

    ``command`` is the whole command line; ``env`` adds or overrides variables of this process's
    environment. The output goes to a log file (``log_path``, else a fresh temporary file; stderr to
    ``stderr_path`` when given, else to the same log) whose tail is shown when the process fails to
    start. Ready means ``ready_path`` answers ``ready_status`` (None: any HTTP answer at all).
    """

    def __init__(
        self,
        command: Sequence[str] = (),
        *,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        name: str = "server",
        cwd: Path | None = None,
        log_path: Path | None = None,
        stderr_path: Path | None = None,
        ready_path: str = "/readyz",
        ready_status: int | None = 200,
    ) -> None:
        self.name = name
        self.argv = list(command)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = dict(env or {})
        self.cwd = Path(cwd) if cwd is not None else REPO_ROOT
        self.ready_path = ready_path
        self.ready_status = ready_status
        self.proc: subprocess.Popen[bytes] | None = None
        self._logs: list[IO[bytes]] = []
        if log_path is None:
            fd, temporary = tempfile.mkstemp(prefix=f"{name}-", suffix=".log")
            os.close(fd)
            log_path = Path(temporary)
        self.log_path = Path(log_path)
        self.stderr_path = Path(stderr_path) if stderr_path is not None else None

    # -- lifecycle ------------------------------------------------------------------------
    def environment(self) -> dict[str, str]:
        return {**os.environ, **self.extra_env}

    def command(self) -> list[str]:
        return list(self.argv)

    def start(self, *, wait: str | bool | None = True, timeout: float = 60.0) -> Self:
        """Start the process; with ``wait`` (True: ``ready_path``, or another path), return once it is ready."""
        self._close_logs()
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._logs = [log]
        stderr: IO[bytes] | int = subprocess.STDOUT
        if self.stderr_path is not None:
            stderr = open(self.stderr_path, "ab")  # noqa: SIM115 - closed in stop()
            self._logs.append(stderr)
        self.proc = subprocess.Popen(
            self.command(),
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=stderr,
            cwd=str(self.cwd),
        )
        if wait:
            self.wait_ready(wait if isinstance(wait, str) else None, timeout=timeout)
        return self

    def wait_ready(self, path: str | None = None, *, timeout: float = 60.0) -> None:
        """Return once ``path`` (default ``ready_path``) answers ``ready_status``; raise if the process exits."""
        path = self.ready_path if path is None else path
        wanted = "anything" if self.ready_status is None else str(self.ready_status)

        def answers() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                status = httpx.get(self.url + path, timeout=1.0, verify=TLS).status_code
            except httpx.HTTPError:
                return False
            return self.ready_status is None or status == self.ready_status

        wait_until(answers, lambda: f"{self.name} to answer {wanted} on {path}:\n{self.log_tail()}", timeout=timeout)

    def stop(self, *, timeout: float = 15.0) -> int | None:
        """SIGTERM (then SIGKILL after ``timeout``); returns the exit code."""
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.resume()  # a frozen process cannot handle SIGTERM
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            code = self.proc.returncode
        self._close_logs()
        return code

    def _close_logs(self) -> None:
        for log in self._logs:
            log.close()
        self._logs = []

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` and return at once (``wait_exit`` collects the exit code), e.g. to watch a graceful stop."""
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float = 15.0) -> int:
        """The exit code, once the process has ended (``subprocess.TimeoutExpired`` after ``timeout``)."""
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def freeze(self) -> None:
        """SIGSTOP: the process holds its sockets but answers nothing."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def __enter__(self) -> Self:
        if self.proc is None:
            try:
                self.start()
            except BaseException:
                self.stop()  # one that never became ready is not left running
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- looking at it --------------------------------------------------------------------
    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def log_tail(self, chars: int = 4000) -> str:
        tails = []
        for path in (self.log_path, self.stderr_path):
            try:
                if path is not None:
                    tails.append(path.read_bytes()[-chars:].decode("utf-8", "replace"))
            except OSError:
                pass
        return "\n--- stderr ---\n".join(tails)


class ServerProcess(ManagedProcess):
    """``python -m registry serve`` on a free loopback port, with its own data folder.

    ``env`` adds or overrides environment variables (``REGISTRY_*`` settings); ``args`` adds
    command-line arguments (``--seed demo``). ``program`` replaces ``python -m registry`` (e.g.
    ``mcp_registry_command()``, or an installed copy's console script); ``cwd``, ``log_path`` and
    ``stderr_path`` are as for ``ManagedProcess``. The process's output goes to a log file whose tail
    is shown when it fails to start.

    ``bare`` starts it as a user would: no ``REGISTRY_*`` variable of this process's environment
    reaches it, and none of the helper's own (data folder, secret key; the admin token only when
    given). Only ``database_url`` and ``admin_token`` when given, ``env`` and ``args`` configure it;
    ``data_dir`` then only names where its data will be (``./data`` under ``cwd`` unless ``args``
    say ``--data-dir``), and the helper does not create it.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        database_url: str | None = None,
        admin_token: str | None = None,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        port: int | None = None,
        log_level: str = "warning",
        python: str = sys.executable,
        name: str = "registry",
        program: Sequence[str] | None = None,
        cwd: Path | None = None,
        log_path: Path | None = None,
        stderr_path: Path | None = None,
        bare: bool = False,
    ) -> None:
        super().__init__(port=port, env=env, name=name, cwd=cwd, log_path=log_path, stderr_path=stderr_path)
        self.data_dir = Path(data_dir)
        self.database_url = database_url
        self.bare = bare
        self.admin_token = admin_token or ("" if bare else "test-admin-" + secrets.token_hex(8))
        self.args = list(args)
        self.log_level = log_level
        self.python = python
        self.program = list(program) if program is not None else None

    # -- lifecycle ------------------------------------------------------------------------
    def environment(self) -> dict[str, str]:
        if self.bare:
            env = {name: value for name, value in os.environ.items() if not name.startswith("REGISTRY_")}
            env["PYTHONUNBUFFERED"] = "1"
            if self.admin_token:
                env["REGISTRY_ADMIN_TOKEN"] = self.admin_token
        else:
            env = {
                **os.environ,
                "REGISTRY_DATA_DIR": str(self.data_dir),
                "REGISTRY_ADMIN_TOKEN": self.admin_token,
                "REGISTRY_SECRET_KEY": process_secret_key(),
                "PYTHONUNBUFFERED": "1",
            }
        if self.database_url:
            env["REGISTRY_DATABASE_URL"] = self.database_url
        else:
            env.pop("REGISTRY_DATABASE_URL", None)
        env.update(self.extra_env)
        return env

    def command(self) -> list[str]:
        program = self.program if self.program is not None else [self.python, "-m", "registry"]
        return [*program, "serve", "--port", str(self.port), "--log-level", self.log_level, *self.args]

    def start(self, *, wait: str | bool | None = True, timeout: float = 60.0) -> Self:
        """Start the process; with ``wait`` (True: ``/readyz``, or another path), return once that answers 200."""
        if not self.bare:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        return super().start(wait=wait, timeout=timeout)

    # -- talking to it --------------------------------------------------------------------
    def client(self, token: str | None = None, *, admin: bool = False, timeout: float = 30.0) -> httpx.Client:
        """An HTTP client for this server: with ``admin``, carrying the admin token."""
        value = self.admin_token if admin else token
        headers = {"Authorization": f"Bearer {value}"} if value else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout, verify=TLS)

    def admin(self, timeout: float = 30.0) -> httpx.Client:
        return self.client(admin=True, timeout=timeout)

    def metric(self, name: str) -> float:
        """The value of an unlabelled sample on ``/metrics`` (a gauge or counter of this process)."""
        with self.admin() as admin:
            text = admin.get("/metrics").text
        prefix = name + " "
        for line in text.splitlines():
            if line.startswith(prefix):
                return float(line.split()[1])
        raise AssertionError(f"{name} is not on /metrics")


def issue_token(admin: httpx.Client, name: str, scopes: list[str], **fields: Any) -> dict[str, Any]:
    """A new API token made through the admin API: its record, with the value under ``token``
    (``fields``: ``label``, ``teams``, ``expires_in_days``, ...)."""
    made = admin.post("/api/v1/tokens", json={"name": name, "scopes": scopes, **fields})
    assert made.status_code == 201, made.text
    record: dict[str, Any] = made.json()
    return record
