#!/usr/bin/env python3
"""Session set-up: the server's CPU per session (``initialize`` + ``notifications/initialized``).

For each database (SQLite in a fresh data dir; PostgreSQL in a fresh schema, dropped afterwards),
the script starts ``mcp-registry serve`` through ``tests/serve_process.py`` with the demo catalog,
opens some warm-up sessions, then, for ``--rounds`` rounds, opens ``--sessions`` sessions as fast
as it can over ``--conns`` keep-alive connections (raw asyncio HTTP/1.1, uvloop when available;
each session: POST initialize, then POST notifications/initialized with the session id). Per
round it records:

- the server's on-CPU time over all its threads (``/proc/<pid>/task/*/schedstat``, nanoseconds),
  from the first request until ``--settle`` seconds after the last answer, so that the write-behind
  flush of the round's sessions is counted too; the server's idle CPU over a window as long is
  measured before each round and subtracted;
- sessions/s (wall time of the creation only), the client's own CPU and everybody else's (the
  machine is shared: ``others`` is host busy time minus server and client);
- that every session of the round is in ``mcp_sessions`` once the round is over (rows counted
  in the database after the settle time): the figure is for stored sessions, not promises.

``--peer`` adds the official SDK's server (``peer_server.py``, its JSON-response mode) as a
third column, measured the same way (it keeps sessions in memory only).

Target (issue 12): <= 0.5 ms of server CPU per session; the rate for 10,000 sessions is reported.
Prints a table with PASS/MISS (median over rounds) and writes
``benchmarks/results/sessions-<timestamp>.json``. Exit status 0 whatever the figures.

    .venv/bin/python benchmarks/sessions.py                          # both DBs, 3 rounds x 10,000
    .venv/bin/python benchmarks/sessions.py --database sqlite --rounds 5 --sessions 2000
    .venv/bin/python benchmarks/sessions.py --peer                   # + the SDK peer side by side
    .venv/bin/python benchmarks/sessions.py --database sqlite --profile   # + py-spy of one round

Only loopback traffic; every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import secrets
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
import environment  # noqa: E402
import peers  # noqa: E402
from fanout import (  # noqa: E402
    DEFAULT_PG_URL,
    INIT_BODY,
    INITIALIZED_BODY,
    POST_HEADERS,
    Http,
    cpu_s,
    host_jiffies,
    psql,
    raise_nofile,
)

from tests.serve_process import ManagedProcess, ServerProcess, free_port, issue_token, upgrade_database  # noqa: E402

TARGET_CPU_MS = 0.5
READY_TIMEOUT_S = 120.0
ROUND_TIMEOUT_S = 600.0
TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def loadavg() -> float:
    return os.getloadavg()[0]


async def open_session(http: Http, headers: dict[str, str]) -> str:
    r = await http.request("POST", "/mcp", {**POST_HEADERS, **headers}, INIT_BODY)
    sid = r.headers.get("mcp-session-id")
    if r.status != 200 or not sid:
        raise RuntimeError(f"initialize: HTTP {r.status} {r.body[:200]!r}")
    version = json.loads(r.body)["result"]["protocolVersion"]
    r2 = await http.request(
        "POST",
        "/mcp",
        {**POST_HEADERS, **headers, "Mcp-Session-Id": sid, "MCP-Protocol-Version": version},
        INITIALIZED_BODY,
    )
    if r2.status not in (200, 202):
        raise RuntimeError(f"notifications/initialized: HTTP {r2.status} {r2.body[:200]!r}")
    return sid


async def open_sessions(port: int, n: int, conns: int, headers: dict[str, str]) -> list[str]:
    out: list[str] = []
    indexes = iter(range(n))

    async def worker() -> None:
        http = Http(port)
        try:
            for _ in indexes:
                out.append(await open_session(http, headers))
        finally:
            await http.close()

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(conns))), ROUND_TIMEOUT_S)
    return out


class Target:
    """One server under test and how to count its stored sessions."""

    def __init__(self, name: str, server: ManagedProcess, headers: dict[str, str], count_rows: Any = None) -> None:
        self.name = name
        self.server = server
        self.headers = headers
        self.count_rows = count_rows  # () -> int, or None (the peer stores nothing)
        self.rounds: list[dict[str, Any]] = []


async def measure_round(target: Target, n: int, conns: int, settle_s: float) -> dict[str, Any]:
    server = target.server
    # The server's idle CPU over a window as long as the settle time: subtracted from the round.
    c0 = cpu_s(server)
    await asyncio.sleep(settle_s)
    idle_rate = (cpu_s(server) - c0) / settle_s
    rows_before = target.count_rows() if target.count_rows else None
    busy0, _ = host_jiffies()
    client0 = time.process_time()
    cpu0 = cpu_s(server)
    t0 = time.perf_counter()
    sids = await open_sessions(server.port, n, conns, target.headers)
    wall = time.perf_counter() - t0
    await asyncio.sleep(settle_s)
    window = time.perf_counter() - t0
    cpu1 = cpu_s(server)
    client = time.process_time() - client0
    busy1, _ = host_jiffies()
    server_cpu = max(0.0, cpu1 - cpu0 - idle_rate * window)
    host_busy = (busy1 - busy0) * TICK_S
    stored = None
    if target.count_rows is not None:
        stored = target.count_rows() - (rows_before or 0)
    return {
        "sessions": len(sids),
        "wall_s": round(wall, 3),
        "sessions_per_s": round(len(sids) / wall, 1),
        "server_cpu_s": round(server_cpu, 3),
        "cpu_ms_per_session": round(server_cpu * 1e3 / len(sids), 4),
        "idle_cpu_pct": round(idle_rate * 100, 2),
        "client_cpu_s": round(client, 2),
        "others_cpu_s": round(max(0.0, host_busy - (cpu1 - cpu0) - client), 2),
        "window_s": round(window, 2),
        "stored": stored,
        "loadavg_1m": round(loadavg(), 2),
    }


def sqlite_rows(db_path: Path) -> Any:
    def count() -> int:
        with contextlib.closing(sqlite3.connect(db_path, timeout=30)) as conn:
            return int(conn.execute("SELECT count(*) FROM mcp_sessions WHERE ended_at IS NULL").fetchone()[0])

    return count


def pg_rows(url: str) -> Any:
    def count() -> int:
        out = subprocess.run(
            ["psql", url, "-tAq", "-c", "SELECT count(*) FROM mcp_sessions WHERE ended_at IS NULL"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return int(out.stdout.strip())

    return count


def registry_target(
    name: str,
    workdir: Path,
    admin_token: str,
    database_url: str | None,
    args: argparse.Namespace,
    code: Path | None = None,
) -> tuple[ServerProcess, Any]:
    """``code``: another checkout whose ``registry`` package this server runs (``--compare``)."""
    data_dir = workdir / name
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {"REGISTRY_SECRET_KEY": secrets.token_urlsafe(32), **dict(kv.split("=", 1) for kv in args.env)}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    server = ServerProcess(
        data_dir,
        admin_token=admin_token,
        database_url=database_url,
        env=env,
        args=["--data-dir", str(data_dir), "--seed", "demo"],
        log_path=workdir / f"{name}.log",
        bare=True,
        name=name,
        cwd=code,  # ``python -m`` puts the working directory first on sys.path
    )
    counter = sqlite_rows(data_dir / "registry.db") if database_url is None else None
    return server, counter


def agent_headers(server: ServerProcess, anonymous: bool) -> dict[str, str]:
    if anonymous:
        return {}
    with server.admin() as admin:
        token = issue_token(admin, "sessions-bench", ["agent"])["token"]
    return {"Authorization": f"Bearer {token}"}


def profile(server: ManagedProcess, workdir: Path, seconds: float) -> subprocess.Popen[bytes] | None:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        log("py-spy not found: no profile")
        return None
    out = workdir / f"{server.name}.speedscope.txt"
    log(f"py-spy record -> {out}")
    command = [py_spy, "record", "--pid", str(server.pid), "--duration", str(int(seconds)), "--rate", "250"]
    command += ["--format", "raw", "--output", str(out), "--nonblocking"]
    return subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    raise_nofile()
    workdir = Path(tempfile.mkdtemp(prefix="sessions-bench-"))
    admin_token = secrets.token_urlsafe(24)
    targets: list[Target] = []
    servers: list[ManagedProcess] = []
    schema = "sessions_" + secrets.token_hex(4)
    pg_base = args.pg_url
    schemas: list[str] = []
    results: dict[str, Any] = {
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "environment": environment.describe(),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg_start": os.getloadavg()},
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "workdir": str(workdir),
    }
    codes: list[tuple[str, Path | None]] = [("", None)]
    if args.compare is not None:
        codes.insert(0, ("before-", args.compare.resolve()))
    try:
        for prefix, code in codes:
            if "sqlite" in args.databases:
                name = f"{prefix}registry-sqlite"
                server, counter = registry_target(name, workdir, admin_token, None, args, code)
                servers.append(server)
                await asyncio.to_thread(server.start, timeout=READY_TIMEOUT_S)
                targets.append(Target(name, server, agent_headers(server, args.anonymous), counter))
            if "postgresql" in args.databases:
                # Each server its own schema: their session tables must not mix.
                schema_k = f"{schema}_{len(schemas)}"
                url = pg_base + ("&" if "?" in pg_base else "?")
                url += "options=" + quote(f"-csearch_path={schema_k}", safe="")
                psql(pg_base, f'CREATE SCHEMA "{schema_k}"')
                schemas.append(schema_k)
                env = {**os.environ, "PYTHONPATH": str(code)} if code is not None else None
                upgrade_database(url, command=[sys.executable, "-m", "registry"], env=env, cwd=code or REPO)
                name = f"{prefix}registry-pg"
                server, _ = registry_target(name, workdir, admin_token, url, args, code)
                servers.append(server)
                await asyncio.to_thread(server.start, timeout=READY_TIMEOUT_S)
                targets.append(Target(name, server, agent_headers(server, args.anonymous), pg_rows(url)))
        if args.peer:
            peers.require_sdk()
            port = free_port()
            cmd = peers.peer_command(port, "--json-response")
            cmd += ["--max-sessions", str(args.warmup + args.sessions * args.rounds + 100)]
            peer = ManagedProcess(cmd, port=port, name="peer", log_path=workdir / "peer.log", ready_status=None)
            peer.ready_path = "/mcp"
            servers.append(peer)
            await asyncio.to_thread(peer.start, timeout=READY_TIMEOUT_S)
            targets.append(Target("peer", peer, {}, None))
        for target in targets:
            log(f"{target.name}: pid {target.server.pid}, port {target.server.port}; warm-up {args.warmup} sessions")
            await open_sessions(target.server.port, args.warmup, args.conns, target.headers)
        await asyncio.sleep(args.settle)
        for k in range(args.rounds):
            for target in targets if k % 2 == 0 else list(reversed(targets)):
                spy = None
                if args.profile and k == 0 and "registry" in target.name:
                    spy = profile(target.server, workdir, args.profile_s)
                r = await measure_round(target, args.sessions, args.conns, args.settle)
                if spy is not None:
                    spy.wait(timeout=args.profile_s + 30)
                target.rounds.append(r)
                log(
                    f"{target.name} round {k + 1}: {r['sessions']} sessions, {r['sessions_per_s']:.0f}/s, "
                    f"server cpu {r['cpu_ms_per_session']:.3f} ms/session; stored {r['stored']}; "
                    f"client {r['client_cpu_s']} s, others {r['others_cpu_s']} s, load {r['loadavg_1m']}"
                )
    finally:
        for s in servers:
            await asyncio.to_thread(s.stop, timeout=30)
        for schema_k in schemas if not args.keep else []:
            with contextlib.suppress(Exception):
                psql(pg_base, f'DROP SCHEMA IF EXISTS "{schema_k}" CASCADE')
        if not args.keep and not args.profile:
            shutil.rmtree(workdir, ignore_errors=True)
    results["targets"] = {}
    for target in targets:
        rounds = target.rounds
        results["targets"][target.name] = {
            "rounds": rounds,
            "median_cpu_ms_per_session": statistics.median(r["cpu_ms_per_session"] for r in rounds),
            "median_sessions_per_s": statistics.median(r["sessions_per_s"] for r in rounds),
            "all_stored": all(r["stored"] in (None, r["sessions"]) for r in rounds),
        }
    results["host"]["loadavg_end"] = os.getloadavg()
    return results


def report(results: dict[str, Any]) -> None:
    cfg = results["config"]
    print(
        f"== session set-up: {cfg['sessions']} sessions x {cfg['rounds']} rounds over {cfg['conns']} connections "
        f"({results['host']['cpus']} CPUs; load {results['host']['loadavg_start'][0]:.2f} -> "
        f"{results['host']['loadavg_end'][0]:.2f}; medians over rounds)"
    )
    print(f"{'server':<18}{'ms CPU/session':>16}{'sessions/s':>12}{'stored':>10}{'others s':>10}   target")
    for name, t in results["targets"].items():
        cpu = t["median_cpu_ms_per_session"]
        others = statistics.median(r["others_cpu_s"] for r in t["rounds"])
        stored = "-" if name == "peer" else ("all" if t["all_stored"] else "MISSING")
        verdict = "" if name == "peer" else ("PASS" if cpu <= TARGET_CPU_MS and t["all_stored"] else "MISS")
        print(
            f"{name:<18}{cpu:>16.3f}{t['median_sessions_per_s']:>12.0f}{stored:>10}{others:>10.1f}   "
            f"{verdict} (<= {TARGET_CPU_MS} ms)"
            if verdict
            else f"{name:<18}{cpu:>16.3f}{t['median_sessions_per_s']:>12.0f}{stored:>10}{others:>10.1f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database", dest="databases", nargs="+", default=["sqlite", "postgresql"])
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conns", type=int, default=8, help="keep-alive connections opening sessions at once")
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--settle", type=float, default=1.0, help="seconds after the last answer still counted")
    ap.add_argument("--anonymous", action="store_true", help="no token (default: an issued mcp token)")
    ap.add_argument("--env", nargs="*", default=[], help="extra KEY=VALUE for the registry")
    ap.add_argument(
        "--compare",
        type=Path,
        help="also run the registry from this checkout (e.g. a worktree of the commit before), side by side",
    )
    ap.add_argument("--peer", action="store_true", help="also the SDK peer (JSON-response mode)")
    ap.add_argument("--pg-url", default=os.environ.get("REGISTRY_TEST_DATABASE_URL") or DEFAULT_PG_URL)
    ap.add_argument("--profile", action="store_true", help="py-spy record the first round of each registry")
    ap.add_argument("--profile-s", type=float, default=10.0)
    ap.add_argument("--keep", action="store_true", help="keep the work dir and the PostgreSQL schema")
    args = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    results = asyncio.run(run(args))
    report(results)
    out_dir = REPO / "benchmarks/results"
    out_dir.mkdir(exist_ok=True)
    out = out_dir / f"sessions-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
