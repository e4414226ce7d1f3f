"""The one way tests and benchmarks start ``mcp-registry serve`` as a real process.

A separate process (not a thread in the test runner) is what lets a test read the server's own
RSS, freeze it with SIGSTOP, kill it with -9, or start several replicas on one database.
Benchmarks import this file too (they put the repository root on ``sys.path``).
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

import httpx

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


class ServerProcess:
    """``python -m registry serve`` on a free loopback port, with its own data folder.

    ``env`` adds or overrides environment variables (``REGISTRY_*`` settings); ``args`` adds
    command-line arguments (``--seed demo``). The process's output goes to a log file whose tail
    is shown when it fails to start.
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
    ) -> None:
        self.name = name
        self.data_dir = Path(data_dir)
        self.database_url = database_url
        self.admin_token = admin_token or "test-admin-" + secrets.token_hex(8)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = dict(env or {})
        self.args = list(args)
        self.log_level = log_level
        self.python = python
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.log_path = Path(tempfile.mkstemp(prefix=f"{name}-", suffix=".log")[1])

    # -- lifecycle ------------------------------------------------------------------------
    def environment(self) -> dict[str, str]:
        env = {
            **os.environ,
            "REGISTRY_DATA_DIR": str(self.data_dir),
            "REGISTRY_ADMIN_TOKEN": self.admin_token,
            "REGISTRY_SECRET_KEY": os.environ.get("REGISTRY_TEST_SECRET_KEY", "test-process-secret-key"),
            "PYTHONUNBUFFERED": "1",
        }
        if self.database_url:
            env["REGISTRY_DATABASE_URL"] = self.database_url
        else:
            env.pop("REGISTRY_DATABASE_URL", None)
        env.update(self.extra_env)
        return env

    def command(self) -> list[str]:
        return [
            self.python,
            "-m",
            "registry",
            "serve",
            "--port",
            str(self.port),
            "--log-level",
            self.log_level,
            *self.args,
        ]

    def start(self, *, wait: str | None = "/readyz", timeout: float = 60.0) -> ServerProcess:
        """Start the process; with ``wait``, return once that path answers 200."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.command(), env=self.environment(), stdout=self._log, stderr=subprocess.STDOUT, cwd=str(REPO_ROOT)
        )
        if wait is not None:
            self.wait_ready(wait, timeout=timeout)
        return self

    def wait_ready(self, path: str = "/readyz", *, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + path, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not answer 200 on {path} within {timeout}s:\n{self.log_tail()}")

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
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def freeze(self) -> None:
        """SIGSTOP: the process holds its sockets but answers nothing."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def __enter__(self) -> ServerProcess:
        if self.proc is None:
            self.start()
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
        try:
            return self.log_path.read_bytes()[-chars:].decode("utf-8", "replace")
        except OSError:
            return ""

    def client(self, token: str | None = None, *, admin: bool = False, timeout: float = 30.0) -> httpx.Client:
        """An HTTP client for this server: with ``admin``, carrying the admin token."""
        value = self.admin_token if admin else token
        headers = {"Authorization": f"Bearer {value}"} if value else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def admin(self, timeout: float = 30.0) -> httpx.Client:
        return self.client(admin=True, timeout=timeout)
