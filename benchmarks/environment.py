"""What a result was measured on: the machine, the code, the versions and the time.

Every benchmark writes this next to its figures (``"environment"`` in its JSON), so a figure read
later says which CPU, which commit and which server stack produced it; the same commit on another
machine, or the same machine on another day, is then a comparison a reader can judge.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

#: The packages the figures rest on: the HTTP server and its parser, the framework, the database
#: layer and drivers, serialization, and the SDK the peer is built on.
PACKAGES = (
    "mcp-registry",
    "uvicorn",
    "httptools",
    "uvloop",
    "starlette",
    "fastapi",
    "sse-starlette",
    "pydantic",
    "sqlalchemy",
    "psycopg",
    "orjson",
    "aiohttp",
    "mcp",
)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git(*args: str) -> str:
    try:
        proc = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout.strip()


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def tool_version(command: list[str]) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (proc.stdout or proc.stderr).split("\n")[0].strip() or None


def describe() -> dict[str, Any]:
    """The environment of this run; cheap (a few subprocesses), called once per run."""
    dirty = git("status", "--porcelain", "--", "registry", "benchmarks")
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpu_model": cpu_model(),
            "cores": os.cpu_count(),
            "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "platform": platform.platform(),
            "loadavg": os.getloadavg(),
        },
        "commit": git("rev-parse", "HEAD"),
        "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
        "dirty": [line.strip() for line in dirty.splitlines()[:20]],
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "packages": versions(),
        "wrk": tool_version(["wrk", "-v"]),
    }


def headline(env: dict[str, Any]) -> str:
    """One line for the top of a printed report."""
    machine = env["machine"]
    packages = env["packages"]
    return (
        f"{env['date']} | {machine['cpu_model']}, {machine['cores']} cores, load {machine['loadavg'][0]:.1f} | "
        f"commit {env['commit'][:10]}{' (dirty)' if env['dirty'] else ''} | {env['python']}, "
        f"uvicorn {packages['uvicorn']}, starlette {packages['starlette']}, sqlalchemy {packages['sqlalchemy']}"
    )
