"""``mcp-registry serve`` as a process: what it sets up for itself before serving."""

from __future__ import annotations

import resource
import shutil
from pathlib import Path

import pytest

from tests.serve_process import ServerProcess, mcp_registry_command


def test_serve_raises_its_open_files_soft_limit_to_the_hard_limit(tmp_path: Path) -> None:
    """Every MCP stream holds a socket: started with a soft limit of 256 (systemd's default is
    1,024), the server raises it to the hard limit, so 10,000 streams fit."""
    prlimit = shutil.which("prlimit")
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if prlimit is None or hard == resource.RLIM_INFINITY or hard <= 256:
        pytest.skip("needs prlimit and a finite hard RLIMIT_NOFILE above 256")
    started_low = [prlimit, f"--nofile=256:{hard}", "--", *mcp_registry_command()]
    with ServerProcess(tmp_path / "data", program=started_low) as server:
        limits = Path(f"/proc/{server.pid}/limits").read_text()
    line = next(row for row in limits.splitlines() if row.startswith("Max open files"))
    assert line.split()[3:5] == [str(hard), str(hard)], line
