"""The production topology files: docker-compose.yml and the nginx load balancer config.

There is no Docker engine here, so the topology itself runs as processes in
tests/replicas; these tests check the files describe that same topology.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_compose_describes_postgres_migrations_two_replicas_and_a_balancer() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "migrate", "registry-a", "registry-b", "nginx"}
    assert services["migrate"]["command"] == ["mcp-registry", "db", "upgrade"]
    for name in ("registry-a", "registry-b"):
        replica = services[name]
        assert replica["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        env = replica["environment"]
        assert env["REGISTRY_DATABASE_URL"].startswith("postgresql://")
        assert "REGISTRY_SECRET_KEY" in env  # the same key on every replica, or secrets cannot be read
    assert set(services["nginx"]["depends_on"]) == {"registry-a", "registry-b"}


def test_nginx_balances_round_robin_without_affinity_and_does_not_buffer_streams() -> None:
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    assert "server registry-a:8080;" in conf and "server registry-b:8080;" in conf
    for affinity in ("ip_hash", "hash ", "sticky", "least_conn"):
        assert affinity not in conf
    assert "proxy_buffering off;" in conf
    assert "proxy_http_version 1.1;" in conf
    assert "proxy_read_timeout 1h;" in conf


def _compose_command() -> list[str] | None:
    """Debian's docker-compose (v1), else the docker CLI's compose plugin if it has one."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=60)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return None


def test_compose_file_is_valid_for_docker_compose() -> None:
    command = _compose_command()
    if command is None:
        reason = "docker exists without its compose plugin" if shutil.which("docker") else "no docker compose CLI"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; .ci/run installs Debian's docker-compose")
        pytest.skip(f"{reason} on this machine (apt-get install docker-compose)")
    result = subprocess.run(
        [*command, "-f", str(ROOT / "docker-compose.yml"), "config", "--quiet"],
        env={**os.environ, "REGISTRY_SECRET_KEY": "check"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
