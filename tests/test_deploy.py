"""The production topology as shipped: docker-compose.yml, .env.example, deploy/nginx/ and the
settings a replica behind a proxy needs.

There is no Docker engine here, so the topology itself runs as processes in tests/replicas; these
tests check that the files describe it completely (every setting a replica reads reaches it from
.env, with the documented defaults; no password in the files; health checks on /readyz; nginx
waits for healthy replicas), validate them with the real tools when they are installed
(docker-compose, nginx), and run nginx with the shipped configuration in front of a real
registry process, over HTTP and HTTPS.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from registry.config import Settings
from registry.limits import Limits, env_name
from tests.certs import write_self_signed
from tests.http import TLS
from tests.security.conftest import MiB, PeakRss, ResponsivenessProbe, ask_healthz, flood_head
from tests.serve_process import ServerProcess, free_port
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
NGINX = ROOT / "deploy" / "nginx"
REPLICAS = ("registry-a", "registry-b")
#: Settings a container does not take from .env: the image and the command set them, or they
#: apply to SQLite only.
NOT_FROM_ENV = {"REGISTRY_DATA_DIR", "REGISTRY_HOST", "REGISTRY_PORT", "REGISTRY_DB_BUSY_TIMEOUT_S"}
REQUIRED = {"POSTGRES_PASSWORD": "pw-from-env", "REGISTRY_SECRET_KEY": "key-from-env"}


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


_REFERENCE = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)(?:(?P<op>:-|:\?)(?P<arg>[^}]*))?\}")


def _interpolate(value: str, env: Mapping[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error} (empty counts as unset for both)."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        found = env.get(name, "")
        if found:
            return found
        if op == ":?":
            raise ValueError(f"{name}: {arg}")
        return arg if op == ":-" else ""

    return _REFERENCE.sub(one, value)


def _replica_environment(env: Mapping[str, str]) -> dict[str, str]:
    raw = _compose()["services"]["registry-a"]["environment"]
    return {name: _interpolate(str(value), env) for name, value in raw.items()}


def _settings_env_names() -> set[str]:
    """Every environment variable ``Settings.from_env`` reads (Limits' own aside)."""
    source = (ROOT / "registry" / "config.py").read_text()
    return set(re.findall(r'"(REGISTRY_[A-Z0-9_]+)"', source))


def _settings_from(env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name in list(os.environ):
        if name.startswith("REGISTRY_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings.from_env()


# -- the files, read as data ------------------------------------------------------------------
def test_compose_describes_postgres_migrations_two_replicas_and_a_balancer() -> None:
    services = _compose()["services"]
    assert set(services) == {"postgres", "migrate", *REPLICAS, "nginx"}
    assert services["migrate"]["command"] == ["mcp-registry", "db", "upgrade"]
    for name in REPLICAS:
        replica = services[name]
        assert replica["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert replica["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert replica["environment"]["REGISTRY_DATABASE_URL"].startswith("postgresql://")
        assert "REGISTRY_SECRET_KEY" in replica["environment"]  # the same key on every replica
        # Healthy means ready: the database answers and the schema is current.
        assert "/readyz" in " ".join(replica["healthcheck"]["test"])
    assert services["nginx"]["depends_on"] == {name: {"condition": "service_healthy"} for name in REPLICAS}


def test_every_setting_a_replica_reads_comes_from_the_env_file() -> None:
    environment = set(_compose()["services"]["registry-a"]["environment"])
    missing = _settings_env_names() - NOT_FROM_ENV - environment
    assert not missing, f"docker-compose.yml does not pass {sorted(missing)} to the replicas"
    limits = {env_name(f.name) for f in fields(Limits)}
    unknown = {n for n in environment if n.startswith("REGISTRY_LIMIT_")} - limits
    assert not unknown, f"not limits: {sorted(unknown)}"
    # Each one documented: the README's "Configuration" and docs/limits.md.
    documented = (ROOT / "README.md").read_text() + (ROOT / "docs" / "limits.md").read_text()
    undocumented = {n for n in environment if n.startswith("REGISTRY_") and f"`{n}`" not in documented}
    assert not undocumented, f"not in the README nor docs/limits.md: {sorted(undocumented)}"
    # ... and each listed in .env.example (the compose-only names too).
    referenced = {m["name"] for m in _REFERENCE.finditer(COMPOSE.read_text())}
    assert referenced <= set(_env_file(ENV_EXAMPLE)), sorted(referenced - set(_env_file(ENV_EXAMPLE)))


def test_no_password_in_the_files_and_the_required_ones_are_required() -> None:
    text = COMPOSE.read_text()
    assert "registry:registry@" not in text
    services = _compose()["services"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    env = dict(REQUIRED)
    assert _replica_environment(env)["PGPASSWORD"] == "pw-from-env"
    for name in REQUIRED:
        with pytest.raises(ValueError, match=name):
            _replica_environment({k: v for k, v in env.items() if k != name})
    example = _env_file(ENV_EXAMPLE)
    assert example["POSTGRES_PASSWORD"] == "" and example["REGISTRY_SECRET_KEY"] == ""
    gitignore = (ROOT / ".gitignore").read_text().split()
    assert "/.env" in gitignore or ".env" in gitignore


def test_the_documented_defaults_are_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """.env.example as shipped, through the compose file, configures a replica exactly like the
    built-in defaults (bar the anonymous-agent switch, spelled out as off: a replica binds 0.0.0.0,
    where the default is off too, the trusted proxy, and the protected production label)."""
    example = _env_file(ENV_EXAMPLE)
    resolved = _replica_environment({**example, **REQUIRED})
    shipped = _settings_from({**resolved, "REGISTRY_HOST": "0.0.0.0"}, monkeypatch)
    builtin = _settings_from(
        {"REGISTRY_SECRET_KEY": REQUIRED["REGISTRY_SECRET_KEY"], "REGISTRY_HOST": "0.0.0.0"}, monkeypatch
    )
    assert shipped.anonymous_agents is False and not builtin.anonymous_agents_enabled
    assert shipped.forwarded_allow_ips == example["REGISTRY_PROXY_IP"]
    # Production deployments protect production (reviewed publishing); the embedded default does
    # not, so one person can try the product alone.
    assert shipped.protected_labels == ("production",) and builtin.protected_labels == ()
    differences = {
        name: (getattr(shipped, name), getattr(builtin, name))
        for name in (f.name for f in fields(Settings))
        if name not in {"database_url", "anonymous_agents", "forwarded_allow_ips", "data_dir", "protected_labels"}
        and getattr(shipped, name) != getattr(builtin, name)
    }
    assert not differences, differences
    # Limits given a value in .env.example carry their default.
    for name, value in example.items():
        if name.startswith("REGISTRY_LIMIT_") and value:
            field = name.removeprefix("REGISTRY_LIMIT_").lower()
            assert float(value) == getattr(Limits(), field), name


def test_forwarded_headers_are_trusted_from_the_proxy_address_only() -> None:
    compose = _compose()
    proxy = compose["services"]["nginx"]["networks"]["default"]["ipv4_address"]
    assert compose["services"]["registry-a"]["environment"]["REGISTRY_FORWARDED_ALLOW_IPS"] == proxy
    assert proxy == "${REGISTRY_PROXY_IP:-172.28.0.10}"
    subnet = compose["networks"]["default"]["ipam"]["config"][0]["subnet"]
    assert subnet == "${REGISTRY_SUBNET:-172.28.0.0/24}"
    proxy_conf = (NGINX / "proxy.conf").read_text()
    # nginx overwrites what a client claims instead of appending to it.
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in proxy_conf
    assert "$proxy_add_x_forwarded_for" not in proxy_conf


def test_nginx_balances_round_robin_without_affinity_and_does_not_buffer_streams() -> None:
    conf = (NGINX / "default.conf").read_text()
    assert re.search(r"server registry-a:8080\b", conf) and re.search(r"server registry-b:8080\b", conf)
    proxy = (NGINX / "proxy.conf").read_text()
    for text in (conf, proxy):
        for affinity in ("ip_hash", "hash ", "sticky", "least_conn"):
            assert affinity not in text
    assert "proxy_buffering off;" in proxy
    assert "proxy_http_version 1.1;" in proxy
    assert "proxy_read_timeout 1h;" in proxy
    mounts = _compose()["services"]["nginx"]["volumes"]
    assert "./deploy/nginx/default.conf:/etc/nginx/conf.d/default.conf:ro" in mounts
    assert "./deploy/nginx/40-registry-tls.sh:/docker-entrypoint.d/40-registry-tls.sh:ro" in mounts
    assert os.access(NGINX / "40-registry-tls.sh", os.X_OK), (
        "the nginx entrypoint skips scripts that are not executable"
    )


# -- docker-compose --------------------------------------------------------------------------
def _compose_command() -> tuple[list[str] | None, str]:
    """Debian's docker-compose (v1), else the docker CLI's compose plugin; or None and why not."""
    if shutil.which("docker-compose"):
        return ["docker-compose"], ""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=60)
        if probe.returncode == 0:
            return ["docker", "compose"], ""
        return (
            None,
            f"docker exists without its compose plugin (`docker compose version`: {probe.stderr.strip()[:120]})",
        )
    return None, "no docker compose CLI"


def _require_compose() -> list[str]:
    command, reason = _compose_command()
    if command is None:
        # Skipped even under CI: .ci/run installs Debian's docker-compose only as a best effort.
        pytest.skip(f"{reason} on this machine (apt-get install docker-compose)")
    return command


def test_compose_command_skips_a_docker_without_its_compose_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A docker CLI without the plugin reads `docker compose -f` as an unknown flag; that is a
    reason to skip, never a failure."""
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\necho \"unknown shorthand flag: 'f' in -f\" >&2\nexit 125\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    command, reason = _compose_command()
    assert command is None
    assert "docker exists without its compose plugin" in reason


def _compose_config(command: list[str], env_file: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in REQUIRED and not k.startswith("REGISTRY_")}
    return subprocess.run(
        [*command, "-f", str(COMPOSE), "--env-file", str(env_file), "config"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_compose_file_is_valid_for_docker_compose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    command = _require_compose()
    result = _compose_config(command, ENV_EXAMPLE, REQUIRED)
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    for name in REPLICAS:
        env = {k: "" if v is None else str(v) for k, v in resolved["services"][name]["environment"].items()}
        assert env["PGPASSWORD"] == REQUIRED["POSTGRES_PASSWORD"]
        assert env["REGISTRY_SECRET_KEY"] == REQUIRED["REGISTRY_SECRET_KEY"]
        assert env == _replica_environment({**_env_file(ENV_EXAMPLE), **REQUIRED})  # the same reading as ours
    # Without the password it refuses, naming it.
    (tmp_path / "missing.env").touch()
    result = _compose_config(command, tmp_path / "missing.env", {"REGISTRY_SECRET_KEY": "k"})
    assert result.returncode != 0 and "POSTGRES_PASSWORD" in result.stderr


# -- nginx, run with the shipped files -------------------------------------------------------
class Nginx:
    """nginx with deploy/nginx/ laid out as the compose file mounts it, under a scratch prefix
    standing for /etc/nginx: upstream names point at ``upstream``, the ports at free ones."""

    def __init__(self, prefix: Path, upstream: str, *, tls: bool) -> None:
        self.prefix = prefix
        self.http_port = free_port()
        self.https_port = free_port()
        registry = prefix / "registry"
        shutil.copytree(NGINX, registry)
        (prefix / "conf.d").mkdir()
        (prefix / "logs").mkdir()

        def local(text: str) -> str:
            text = text.replace("/etc/nginx", str(prefix))
            text = re.sub(r"registry-[ab]:8080", upstream, text)
            text = text.replace("listen 80;", f"listen 127.0.0.1:{self.http_port};")
            return text.replace("listen 443 ssl;", f"listen 127.0.0.1:{self.https_port} ssl;")

        for conf in registry.glob("*.conf"):
            conf.write_text(local(conf.read_text()))
        (prefix / "conf.d" / "default.conf").write_text(local((NGINX / "default.conf").read_text()))
        if tls:
            write_self_signed(prefix / "certs" / "fullchain.pem", prefix / "certs" / "privkey.pem", host="localhost")
        (prefix / "nginx.conf").write_text(
            # The image's nginx.conf, reduced: conf.d/*.conf inside http {}.
            f"pid {prefix}/nginx.pid;\nerror_log {prefix}/logs/error.log warn;\n"
            "events { worker_connections 64; }\n"
            f"http {{\n access_log {prefix}/logs/access.log;\n"
            f" client_body_temp_path {prefix}/body; proxy_temp_path {prefix}/proxy;\n"
            f" include {prefix}/conf.d/*.conf;\n}}\n"
        )
        # The image's entrypoint runs the hook before nginx starts.
        hook = subprocess.run(
            ["sh", str(NGINX / "40-registry-tls.sh")],
            env={**os.environ, "REGISTRY_NGINX_DIR": str(prefix), "REGISTRY_HTTPS_PORT": str(self.https_port)},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert hook.returncode == 0, hook.stderr
        self.hook_output = hook.stdout
        self.proc: subprocess.Popen[bytes] | None = None

    def argv(self, *extra: str) -> list[str]:
        return ["nginx", "-p", str(self.prefix), "-c", str(self.prefix / "nginx.conf"), *extra]

    def test_config(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv("-t"), capture_output=True, text=True, timeout=30)

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv("-g", "daemon off;"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        proc = self.proc

        def listening() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"nginx did not start: {proc.stderr.read() if proc.stderr else ''}")
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", self.http_port)) == 0

        wait_until(listening, "nginx to listen", timeout=15)

    def pids(self) -> list[int]:
        """The master's pid and its workers' (they read the requests)."""
        if self.proc is None:
            return []
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        return [self.proc.pid, *map(int, children)]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def _require_nginx() -> None:
    if shutil.which("nginx") is None:
        # Optional even under CI: the compose topology runs nginx from its image.
        pytest.skip("nginx is not installed (apt-get install nginx) to check deploy/nginx/ with it")


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[ServerProcess]:
    """One registry process standing for both replicas, trusting forwarded headers from 127.0.0.1
    (where nginx connects from here), with its access log on."""
    server = ServerProcess(
        tmp_path / "replica",
        env={"REGISTRY_FORWARDED_ALLOW_IPS": "127.0.0.1"},
        args=["--access-log"],
        log_level="info",
        name="replica",
    )
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_nginx_accepts_the_shipped_configuration(tmp_path: Path, tls: bool) -> None:
    _require_nginx()
    nginx = Nginx(tmp_path / "nginx", "127.0.0.1:9", tls=tls)
    result = nginx.test_config()
    assert result.returncode == 0, result.stderr
    assert ("HTTPS on" in nginx.hook_output) == tls
    assert (nginx.prefix / "conf.d" / "registry-tls.conf").exists() == tls


def test_through_nginx_over_http(tmp_path: Path, replica: ServerProcess) -> None:
    """Plain HTTP through the shipped proxy: requests reach the replica, the client address it
    logs is the real one (not what the client claimed), the scheme http."""
    _require_nginx()
    nginx = Nginx(tmp_path / "nginx", f"127.0.0.1:{replica.port}", tls=False)
    nginx.start()
    try:
        base = f"http://127.0.0.1:{nginx.http_port}"
        spoof = {"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"}
        assert httpx.get(base + "/readyz", headers=spoof, timeout=10, verify=TLS).status_code == 200
        redirect = httpx.get(base + "/ui", headers=spoof, timeout=10, verify=TLS)
        assert redirect.status_code == 307
        assert redirect.headers["location"].startswith("http://"), redirect.headers["location"]
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {replica.admin_token}"}, verify=TLS) as api:
            assert api.get("/api/v1/prompts").status_code == 200
        log = replica.log_tail(20_000)
        assert '"GET /ui HTTP/1.1" 307' in log
        assert "203.0.113.9" not in log
    finally:
        nginx.stop()


def test_through_nginx_over_https(tmp_path: Path, replica: ServerProcess) -> None:
    """With a certificate mounted: HTTPS serves, the replica learns the scheme from the proxy, and
    plain HTTP is redirected (308, so a POST stays a POST)."""
    _require_nginx()
    nginx = Nginx(tmp_path / "nginx", f"127.0.0.1:{replica.port}", tls=True)
    nginx.start()
    try:
        https = f"https://localhost:{nginx.https_port}"
        trust = ssl.create_default_context(cafile=str(nginx.prefix / "certs" / "fullchain.pem"))
        with httpx.Client(verify=trust, timeout=10) as client:
            ready = client.get(https + "/readyz")
            assert ready.status_code == 200
            assert ready.headers["strict-transport-security"].startswith("max-age=")
            redirect = client.get(https + "/ui")
            assert redirect.status_code == 307
            assert redirect.headers["location"].startswith("https://"), redirect.headers["location"]
        plain = httpx.post(f"http://localhost:{nginx.http_port}/mcp", json={}, timeout=10, verify=TLS)
        assert plain.status_code == 308
        assert plain.headers["location"] == f"https://localhost:{nginx.https_port}/mcp"
    finally:
        nginx.stop()


def test_the_proxy_bounds_request_heads() -> None:
    """The shipped config sets nginx's bound on request heads explicitly: 4 buffers of 16 KiB (a
    line of at most 16 KiB, 64 KiB in all), the replicas' default total (their rule is per byte,
    nginx's per line: what it does under a flood is the next test's)."""
    proxy = (NGINX / "proxy.conf").read_text()
    assert re.search(r"^large_client_header_buffers 4 16k;$", proxy, re.M), proxy
    assert Limits().request_head_bytes == 4 * 16 * 1024


@pytest.mark.parametrize(
    "start, piece, total",
    [
        (b"X-Huge: ", b"a" * 65536, 64 * MiB),  # one 64 MB header value
        (b"", b"X-Small: 1\r\n" * 5000, 200 * MiB),  # 200 MB of small headers
    ],
    ids=["64-mb-header", "200-mb-of-small-headers"],
)
def test_through_nginx_oversized_heads_are_refused_while_others_are_served(
    tmp_path: Path, replica: ServerProcess, start: bytes, piece: bytes, total: int
) -> None:
    _require_nginx()
    nginx = Nginx(tmp_path / "nginx", f"127.0.0.1:{replica.port}", tls=False)
    nginx.start()
    try:
        base = f"http://127.0.0.1:{nginx.http_port}"
        head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + start
        with PeakRss(replica, nginx.pids) as rss, ResponsivenessProbe(ask_healthz, base) as probe:
            flood = flood_head("127.0.0.1", nginx.http_port, start=head, piece=piece, total=total)
        # nginx answers at once, then reads and drops what still comes for a while (its lingering
        # close, so that the client reads the answer before the connection is reset).
        assert flood.status == 400 and b"Request Header Or Cookie Too Large" in flood.answer, flood.answer[:200]
        probe.assert_responsive()
        rss.assert_within(50 * MiB)
        assert "POST /mcp" not in replica.log_tail(20_000), "the oversized request reached the replica"
    finally:
        nginx.stop()


def test_replica_ignores_forwarded_headers_unless_told_whom_to_trust(tmp_path: Path) -> None:
    """Without REGISTRY_FORWARDED_ALLOW_IPS nobody can claim another address or scheme; with it,
    only the named proxy can."""
    spoof = {"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"}
    for trusted, believed in ((None, False), ("10.9.9.9", False), ("127.0.0.1", True)):
        env = {"REGISTRY_FORWARDED_ALLOW_IPS": trusted} if trusted else {}
        server = ServerProcess(tmp_path / f"s-{trusted}", env=env, args=["--access-log"], log_level="info")
        server.start()
        try:
            location = httpx.get(server.url + "/ui", headers=spoof, timeout=10, verify=TLS).headers["location"]
            assert location.startswith("https://" if believed else "http://"), (trusted, location)
            assert ("203.0.113.9" in server.log_tail(20_000)) == believed, trusted
        finally:
            server.stop()
