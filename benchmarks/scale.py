#!/usr/bin/env python3
"""Scale: 100,000 prompts on SQLite and on PostgreSQL, agents reading while admins write.

For each database (``--database sqlite|postgresql|both``), from an empty database:

1. **import**: ``mcp-registry import`` of a generated bundle folder of ``--entries`` small prompts
   (one YAML file each), timed as a process from start to exit: entries/s.
2. **start**: ``mcp-registry serve`` on that database (``tests/serve_process.py``); time from process
   start to the first successful ``prompts/list`` over MCP; the server's RSS then.
3. **list**: every page of ``prompts/list`` (following ``nextCursor``), each page timed; the number of
   prompts listed; the server's RSS after it.
4. **get**: ``--get-samples`` sequential ``prompts/get`` of random prompts on one keep-alive connection.
5. **put**: ``--puts`` sequential admin ``PUT /api/v1/prompts/{name}`` of random prompts.
6. **storm**: ``--agents`` agent processes loop ``prompts/get`` of random prompts (own session, own
   keep-alive connection, ``--agent-pause-ms`` between requests) while one admin edit of one prompt
   lands every 200 ms for 10 s. Reported: the agents' worst and p99 latency from the first edit until
   the last edit is served, and the delay from sending the last edit until ``prompts/get`` returns
   its text (polled on another session).
7. **live import**: the same agents while ``mcp-registry import`` writes 2,000 new prompts into the same
   database the server is running on. Reported: the agents' worst latency from the import's start
   until the last imported prompt is served (plus 1 s), and how long the server took to serve it.

Targets (issue 8): import >= 2,000 entries/s; first answer <= 5 s; RSS <= 600 MB (decimal MB, after
start and after a full listing); prompts/get p50 <= 2 ms; admin PUT p50 <= 20 ms; the agents' worst
prompts/get latency <= 100 ms during the edits and during the live import; last edit served <= 1 s.

Prints a table with PASS/MISS per figure; ``--json FILE`` writes every figure, the raw percentiles and
the git state measured. Every phase is bounded by ``--max-seconds``; a phase that runs out is reported
as such and the run goes on. Exit status 0 whatever the figures (non-zero only when it cannot run).

    .venv/bin/python benchmarks/scale.py --entries 2000 --database sqlite   # quick check
    .venv/bin/python benchmarks/scale.py --json scale.json                  # 100,000 prompts, both DBs

Only loopback traffic and the PostgreSQL server given by ``--pg-url`` (a fresh schema, dropped at the
end unless ``--keep``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import math
import multiprocessing
import os
import platform
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
import environment  # noqa: E402

from tests.interop.mcp_wire import StreamableHttpClient, response_messages  # noqa: E402
from tests.serve_process import ServerProcess, mcp_registry_command, rss_bytes  # noqa: E402

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
MB = 1_000_000

TARGET_IMPORT_RATE = 2000.0  # entries/s
TARGET_FIRST_ANSWER_S = 5.0
TARGET_RSS_MB = 600.0
TARGET_GET_P50_MS = 2.0
TARGET_PUT_P50_MS = 20.0
TARGET_WORST_MS = 100.0
TARGET_LAST_EDIT_S = 1.0

EDIT_INTERVAL_S = 0.2
EDIT_DURATION_S = 10.0
LIVE_IMPORT_ENTRIES = 2000


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the catalog
def prompt_name(prefix: str, i: int) -> str:
    return f"{prefix}{i:06d}"


def prompt_template(name: str, marker: str = "") -> str:
    return f"[{name}]{marker} Write a short note about {{{{ topic }}}} for the team."


def prompt_spec(name: str, i: int, marker: str = "") -> dict[str, Any]:
    """The JSON form of a generated prompt (the same as its YAML file), for admin PUTs."""
    return {
        "title": f"Prompt {i}",
        "description": f"Scale benchmark prompt {i} (group {i % 100})",
        "tags": ["scale", f"group-{i % 100}"],
        "arguments": [{"name": "topic", "description": "What to write about", "required": True}],
        "template": prompt_template(name, marker),
    }


def write_bundle(folder: Path, count: int, prefix: str) -> float:
    """``count`` prompt files under ``folder/prompts`` (plain string formatting: 100,000 in seconds)."""
    started = time.perf_counter()
    prompts = folder / "prompts"
    prompts.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        name = prompt_name(prefix, i)
        (prompts / f"{name}.yaml").write_text(
            f"name: {name}\n"
            f"title: Prompt {i}\n"
            f'description: "Scale benchmark prompt {i} (group {i % 100})"\n'
            f"tags: [scale, group-{i % 100}]\n"
            "arguments:\n"
            "- name: topic\n"
            "  description: What to write about\n"
            "  required: true\n"
            f'template: "{prompt_template(name)}"\n',
            encoding="utf-8",
        )
    return time.perf_counter() - started


def bundle(workdir: Path, count: int, prefix: str) -> Path:
    """The bundle folder for ``count`` prompts, generated once per work folder."""
    folder = workdir / f"bundle-{prefix}-{count}"
    done = folder / ".complete"
    if not done.exists():
        shutil.rmtree(folder, ignore_errors=True)
        seconds = write_bundle(folder, count, prefix)
        done.write_text(str(count))
        log(f"wrote {count} prompt files to {folder} in {seconds:.1f}s")
    return folder


# --------------------------------------------------------------------------- statistics
def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def summary_ms(seconds: list[float]) -> dict[str, Any]:
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "p50_ms": pct(ms, 50),
        "p99_ms": pct(ms, 99),
        "max_ms": max(ms) if ms else None,
        "mean_ms": statistics.fmean(ms) if ms else None,
    }


# --------------------------------------------------------------------------- MCP on the wire
def mcp_client(url: str, timeout: float = 30.0) -> StreamableHttpClient:
    client = StreamableHttpClient(httpx.Client(base_url=url, timeout=timeout))
    client.initialize()
    return client


def get_message(name: str, request_id: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "prompts/get",
        "params": {"name": name, "arguments": {"topic": "scale"}},
    }


def prompt_text(client: StreamableHttpClient, name: str) -> str | None:
    """The rendered text of ``name``, or None when the server does not serve it (yet)."""
    response = client.post(get_message(name))
    if response.status_code != 200:
        return None
    for message in response_messages(response):
        result = message.get("result")
        if message.get("id") == 1 and isinstance(result, dict):
            return str(result["messages"][0]["content"]["text"])
    return None


# --------------------------------------------------------------------------- agent processes
def _agent_main(
    url: str,
    names: list[str],
    pause_s: float,
    seed: int,
    index: int,
    stop: Any,
    out: Any,
) -> None:
    """One agent (a forked process): its own session and connection, prompts/get in a loop until
    ``stop``; sends back (send time, latency) pairs on ``out``. perf_counter is CLOCK_MONOTONIC on
    Linux, so the parent can compare these times with its own."""
    rnd = random.Random(seed)
    samples: list[tuple[float, float]] = []
    errors: list[str] = []
    try:
        client = mcp_client(url)
        client.rpc(get_message(names[0]))
    except Exception as exc:
        out.put(("done", index, samples, [f"initialize: {exc!r}"]))
        return
    out.put(("ready", index))
    request_id = 1
    while not stop.is_set():
        request_id += 1
        name = rnd.choice(names)
        body = json.dumps(get_message(name, request_id))
        started = time.perf_counter()
        try:
            response = client.http.post(client.path, content=body, headers=client.headers())
            elapsed = time.perf_counter() - started
            ok = response.status_code == 200 and any(
                m.get("id") == request_id and "result" in m for m in response_messages(response)
            )
            if not ok and len(errors) < 20:
                errors.append(f"{name}: {response.status_code} {response.text[:200]}")
        except httpx.HTTPError as exc:
            elapsed = time.perf_counter() - started
            if len(errors) < 20:
                errors.append(f"{name}: {exc!r}")
        samples.append((started, elapsed))
        if pause_s:
            time.sleep(pause_s)
    client.http.close()
    out.put(("done", index, samples, errors))


@dataclass
class Agents:
    """``count`` agent processes reading ``names`` from ``url``; ``results()`` stops them."""

    url: str
    names: list[str]
    count: int
    pause_s: float
    processes: list[Any] = field(default_factory=list)
    samples: list[tuple[float, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        context = multiprocessing.get_context("fork")
        self.stop = context.Event()
        self.out = context.Queue()
        for index in range(self.count):
            process = context.Process(
                target=_agent_main,
                args=(self.url, self.names, self.pause_s, 1000 + index, index, self.stop, self.out),
                daemon=True,
            )
            process.start()
            self.processes.append(process)
        ready = 0
        try:
            while ready < self.count:
                message = self.out.get(timeout=60)
                if message[0] != "ready":  # an agent that could not start
                    self.errors += message[3]
                ready += 1
        except BaseException:
            self.stop.set()
            for process in self.processes:
                process.kill()
            raise

    def results(self, timeout: float = 60.0) -> None:
        self.stop.set()
        done = sum(1 for p in self.processes if not p.is_alive())  # never started properly
        deadline = time.monotonic() + timeout
        while done < self.count and time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                message = self.out.get(timeout=max(0.1, deadline - time.monotonic()))
                if message[0] == "done":
                    self.samples += message[2]
                    self.errors += message[3]
                    done += 1
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()

    def window(self, start: float, end: float) -> dict[str, Any]:
        """Latencies of the requests sent in [start, end], and of those still open at ``start``."""
        chosen = [(sent, lat) for sent, lat in self.samples if start <= sent <= end or (sent < start < sent + lat)]
        out = summary_ms([lat for _, lat in chosen])
        if chosen:  # when the slowest request was sent, from the window's start: what it coincided with
            out["worst_sent_at_s"] = max(chosen, key=lambda sample: sample[1])[0] - start
            out["over_100ms"] = sum(1 for _, lat in chosen if lat > TARGET_WORST_MS / 1000)
            slowest = sorted(chosen, key=lambda sample: -sample[1])[:10]
            out["slowest"] = [
                {"sent_at_s": round(sent - start, 3), "ms": round(lat * 1000, 1)} for sent, lat in slowest
            ]
        out["errors"] = len(self.errors)
        out["error_examples"] = self.errors[:5]
        return out


# --------------------------------------------------------------------------- databases
@dataclass
class Database:
    kind: str
    url: str
    cleanup: Callable[[], None] = lambda: None


@contextlib.contextmanager
def fresh_database(kind: str, workdir: Path, pg_url: str, keep: bool) -> Iterator[Database]:
    if kind == "sqlite":
        folder = workdir / "sqlite"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        yield Database(kind, f"sqlite:///{folder / 'registry.db'}")
        return
    from sqlalchemy import create_engine, text

    from registry.db.engine import normalize_database_url

    server = normalize_database_url(pg_url)
    schema = "scale_" + secrets.token_hex(5)
    engine = create_engine(server, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = server + ("&" if "?" in server else "?") + "options=" + quote(f"-csearch_path={schema}")
    log(f"PostgreSQL schema {schema}")
    try:
        yield Database(kind, url)
    finally:
        if keep:
            log(f"kept schema {schema}")
        else:
            with engine.connect() as conn:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()


def cli_env(secret_key: str, entries: int) -> dict[str, str]:
    """This environment without REGISTRY_* settings, plus the key and bundle limits a big import needs."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("REGISTRY_")}
    env.update(limit_env(entries))
    env["REGISTRY_SECRET_KEY"] = secret_key
    env["PYTHONUNBUFFERED"] = "1"
    return env


def limit_env(entries: int) -> dict[str, str]:
    return {
        "REGISTRY_LIMIT_BUNDLE_FILES": str(max(10_000, entries + LIVE_IMPORT_ENTRIES + 100)),
        "REGISTRY_LIMIT_BUNDLE_BYTES": str(max(32 * 2**20, entries * 2048)),
    }


def run_cli(args: list[str], env: dict[str, str], timeout: float, log_path: Path) -> dict[str, Any]:
    """Run ``mcp-registry ARGS``; wall time, exit code, and the output's last lines (the log keeps it all)."""
    started = time.perf_counter()
    with open(log_path, "ab") as out:
        process = subprocess.Popen(
            [*mcp_registry_command(), *args], env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            code: int | None = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            code = None
    seconds = time.perf_counter() - started
    tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-3:]
    return {"seconds": seconds, "exit_code": code, "timed_out": code is None, "tail": tail}


# --------------------------------------------------------------------------- phases
class PhaseTimeout(Exception):
    pass


def first_answer(server: ServerProcess, max_seconds: float) -> dict[str, Any]:
    """Start the server; seconds until the first successful prompts/list over MCP."""
    started = time.perf_counter()
    server.start(wait=False)
    attempts = 0
    while True:
        elapsed = time.perf_counter() - started
        if elapsed > max_seconds:
            raise PhaseTimeout(f"no prompts/list answer within {max_seconds}s:\n{server.log_tail(2000)}")
        if server.proc is not None and server.proc.poll() is not None:
            raise RuntimeError(f"server exited with {server.proc.returncode}:\n{server.log_tail(4000)}")
        attempts += 1
        client = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=max(1.0, max_seconds - elapsed)))
        try:
            client.initialize()
            answer = client.request("prompts/list", {})
            if "result" in answer:
                seconds = time.perf_counter() - started
                return {"seconds": seconds, "attempts": attempts, "first_page": len(answer["result"]["prompts"])}
        except (httpx.HTTPError, AssertionError, KeyError, ValueError):
            pass
        finally:
            client.http.close()
        time.sleep(0.02)


def full_listing(url: str, max_seconds: float) -> tuple[list[str], list[float]]:
    """Every prompt name, following nextCursor; and each page's latency."""
    client = mcp_client(url)
    names: list[str] = []
    pages: list[float] = []
    params: dict[str, Any] = {}
    deadline = time.perf_counter() + max_seconds
    try:
        while True:
            if time.perf_counter() > deadline:
                raise PhaseTimeout(f"listing not finished within {max_seconds}s ({len(names)} prompts listed)")
            started = time.perf_counter()
            answer = client.request("prompts/list", params)
            pages.append(time.perf_counter() - started)
            result = answer["result"]
            names += [prompt["name"] for prompt in result["prompts"]]
            if "nextCursor" not in result:
                return names, pages
            params = {"cursor": result["nextCursor"]}
    finally:
        client.http.close()


def timed_gets(url: str, names: list[str], samples: int, max_seconds: float) -> dict[str, Any]:
    client = mcp_client(url)
    rnd = random.Random(7)
    latencies: list[float] = []
    wrong = 0
    deadline = time.perf_counter() + max_seconds
    try:
        for _ in range(samples):
            if time.perf_counter() > deadline:
                break
            name = rnd.choice(names)
            started = time.perf_counter()
            text = prompt_text(client, name)
            latencies.append(time.perf_counter() - started)
            wrong += text is None or f"[{name}]" not in text
    finally:
        client.http.close()
    return {**summary_ms(latencies), "wrong": wrong}


def put_prompt(admin: httpx.Client, name: str, marker: str) -> tuple[float, int]:
    i = int(name[1:])
    body = {**prompt_spec(name, i, marker), "change_note": "scale benchmark"}
    started = time.perf_counter()
    response = admin.put(f"/api/v1/prompts/{name}", json=body)
    return time.perf_counter() - started, response.status_code


def timed_puts(server: ServerProcess, names: list[str], count: int, max_seconds: float) -> dict[str, Any]:
    rnd = random.Random(11)
    latencies: list[float] = []
    failed: list[int] = []
    deadline = time.perf_counter() + max_seconds
    with server.admin(timeout=max_seconds) as admin:
        for k in range(count):
            if time.perf_counter() > deadline:
                break
            seconds, status = put_prompt(admin, rnd.choice(names), f" put {k}")
            latencies.append(seconds)
            if status != 200:
                failed.append(status)
    return {**summary_ms(latencies), "failed": failed[:10]}


def wait_served(client: StreamableHttpClient, name: str, marker: str, max_seconds: float) -> bool:
    """Poll prompts/get of ``name`` until its text contains ``marker``; False if not within ``max_seconds``."""
    started = time.perf_counter()
    while time.perf_counter() - started < max_seconds:
        text = prompt_text(client, name)
        if text is not None and marker in text:
            return True
        time.sleep(0.005)
    return False


def edit_storm(server: ServerProcess, names: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """One edit of ``target`` every 200 ms for 10 s while the agents read."""
    target = names[len(names) // 2]
    poller = mcp_client(server.url)  # a session of its own, opened before the clock starts
    agents = Agents(server.url, names, args.agents, args.agent_pause_ms / 1000)
    put_latencies: list[float] = []
    statuses: list[int] = []
    edits = round(EDIT_DURATION_S / EDIT_INTERVAL_S)
    served_after: float | None = None
    try:
        time.sleep(1.0)  # the agents' steady state before the first edit
        with server.admin(timeout=args.max_seconds) as admin:
            begin = time.perf_counter()
            last_sent = begin
            for k in range(edits):
                due = begin + k * EDIT_INTERVAL_S
                time.sleep(max(0.0, due - time.perf_counter()))
                last_sent = time.perf_counter()
                seconds, status = put_prompt(admin, target, f" edit {k}")
                put_latencies.append(seconds)
                statuses.append(status)
        # From sending the last edit until prompts/get answers with its text.
        if wait_served(poller, target, f" edit {edits - 1} ", args.max_seconds):
            served_after = time.perf_counter() - last_sent
        end = time.perf_counter()
        time.sleep(0.2)
    finally:
        poller.http.close()
        agents.results()
    return {
        "target": target,
        "edits": edits,
        "put": {**summary_ms(put_latencies), "failed": [s for s in statuses if s != 200][:10]},
        "last_edit_served_s": served_after,
        "agents": agents.window(begin, end),
        "agents_total_requests": len(agents.samples),
    }


def live_import(
    server: ServerProcess, db: Database, names: list[str], workdir: Path, args: argparse.Namespace, secret_key: str
) -> dict[str, Any]:
    """2,000 new prompts imported through the CLI into the database the server runs on, agents reading."""
    folder = bundle(workdir, LIVE_IMPORT_ENTRIES, "q")
    last = prompt_name("q", LIVE_IMPORT_ENTRIES - 1)
    poller = mcp_client(server.url)
    agents = Agents(server.url, names, args.agents, args.agent_pause_ms / 1000)
    served_after_exit: float | None = None
    served_after_start: float | None = None
    try:
        time.sleep(1.0)
        begin = time.perf_counter()
        cli = run_cli(
            ["import", str(folder), "--database-url", db.url, "--data-dir", str(workdir / "cli-data")],
            cli_env(secret_key, args.entries),
            args.max_seconds,
            workdir / f"{db.kind}-live-import.log",
        )
        exited = time.perf_counter()
        if wait_served(poller, last, f"[{last}]", args.max_seconds):
            served_after_exit = time.perf_counter() - exited
            served_after_start = time.perf_counter() - begin
        time.sleep(1.0)
        end = time.perf_counter()
    finally:
        poller.http.close()
        agents.results()
    return {
        "import": cli,
        "entries_per_s": LIVE_IMPORT_ENTRIES / cli["seconds"] if cli["exit_code"] == 0 else None,
        "served_after_import_exit_s": served_after_exit,
        "served_after_import_start_s": served_after_start,
        "agents": agents.window(begin, end),
        "agents_total_requests": len(agents.samples),
    }


# --------------------------------------------------------------------------- one database
def run_database(kind: str, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"database": kind, "entries": args.entries, "errors": []}
    secret_key = secrets.token_urlsafe(32)
    folder = bundle(workdir, args.entries, "p")
    with fresh_database(kind, workdir, args.pg_url, args.keep) as db:
        env = cli_env(secret_key, args.entries)
        log(f"[{kind}] db upgrade")
        upgrade = run_cli(
            ["db", "upgrade", "--database-url", db.url, "--data-dir", str(workdir / "cli-data")],
            env,
            args.max_seconds,
            workdir / f"{kind}-cli.log",
        )
        if upgrade["exit_code"] != 0:
            result["errors"].append(f"db upgrade failed: {upgrade}")
            return result
        log(f"[{kind}] import {args.entries} prompts")
        imported = run_cli(
            ["import", str(folder), "--database-url", db.url, "--data-dir", str(workdir / "cli-data")],
            env,
            args.max_seconds,
            workdir / f"{kind}-import.log",
        )
        imported["entries_per_s"] = args.entries / imported["seconds"] if imported["exit_code"] == 0 else None
        result["import"] = imported
        log(f"[{kind}] import: {imported['seconds']:.1f}s, exit {imported['exit_code']}, {imported['tail']}")

        server = ServerProcess(
            workdir / f"{kind}-data",
            database_url=db.url,
            env={"REGISTRY_SECRET_KEY": secret_key, **limit_env(args.entries)},
            log_path=workdir / f"{kind}-server.log",
            name=f"registry-{kind}",
        )
        try:
            log(f"[{kind}] start")
            result["start"] = first_answer(server, args.max_seconds)
            time.sleep(0.2)
            result["rss_after_start_mb"] = server.rss() / MB
            first, rss = result["start"]["seconds"], result["rss_after_start_mb"]
            log(f"[{kind}] first answer after {first:.2f}s, RSS {rss:.0f} MB")

            started = time.perf_counter()
            names, pages = full_listing(server.url, args.max_seconds)
            result["listing"] = {
                "prompts": len(names),
                "unique": len(set(names)),
                "seconds": time.perf_counter() - started,
                "pages": summary_ms(pages),
            }
            result["rss_after_listing_mb"] = server.rss() / MB
            log(f"[{kind}] listed {len(names)} prompts, RSS {result['rss_after_listing_mb']:.0f} MB")
            names = [n for n in names if n.startswith("p")] or names
            if not names:
                raise RuntimeError("the server lists no prompts: nothing to measure")

            result["get"] = timed_gets(server.url, names, args.get_samples, args.max_seconds)
            log(f"[{kind}] prompts/get p50 {result['get']['p50_ms']:.2f} ms")
            result["put"] = timed_puts(server, names, args.puts, args.max_seconds)
            log(f"[{kind}] PUT p50 {result['put']['p50_ms']:.1f} ms")
            log(f"[{kind}] edit storm ({args.agents} agents)")
            result["storm"] = edit_storm(server, names, args)
            log(
                f"[{kind}] storm: agents max {result['storm']['agents']['max_ms']:.0f} ms, "
                f"last edit served after {result['storm']['last_edit_served_s']}"
            )
            if not args.skip_live_import:
                log(f"[{kind}] live import of {LIVE_IMPORT_ENTRIES}")
                result["live_import"] = live_import(server, db, names, workdir, args, secret_key)
                log(f"[{kind}] live import: agents max {result['live_import']['agents']['max_ms']:.0f} ms")
            result["rss_end_mb"] = server.rss() / MB
            result["rss_peak_mb"] = peak_rss(server.pid) / MB
        except Exception as exc:
            result["errors"].append(f"{type(exc).__name__}: {exc}")
            log(f"[{kind}] stopped: {type(exc).__name__}: {exc}")
        finally:
            server.stop()
    return result


def peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return rss_bytes(pid)


# --------------------------------------------------------------------------- report
def dig(data: dict[str, Any], *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or data.get(key) is None:
            return None
        data = data[key]
    return data


#: (label, path into a database's result, unit, target, "min" (value >= target) or "max" (value <= target))
FIGURES: list[tuple[str, tuple[str, ...], str, float | None, str]] = [
    ("import rate", ("import", "entries_per_s"), "entries/s", TARGET_IMPORT_RATE, "min"),
    ("first answer after start", ("start", "seconds"), "s", TARGET_FIRST_ANSWER_S, "max"),
    ("RSS after start", ("rss_after_start_mb",), "MB", TARGET_RSS_MB, "max"),
    ("RSS after full listing", ("rss_after_listing_mb",), "MB", TARGET_RSS_MB, "max"),
    ("RSS peak (VmHWM)", ("rss_peak_mb",), "MB", None, ""),
    ("prompts listed", ("listing", "prompts"), "", None, ""),
    ("full listing", ("listing", "seconds"), "s", None, ""),
    ("prompts/list page p50", ("listing", "pages", "p50_ms"), "ms", None, ""),
    ("prompts/get p50", ("get", "p50_ms"), "ms", TARGET_GET_P50_MS, "max"),
    ("prompts/get p99", ("get", "p99_ms"), "ms", None, ""),
    ("admin PUT p50", ("put", "p50_ms"), "ms", TARGET_PUT_P50_MS, "max"),
    ("admin PUT p99", ("put", "p99_ms"), "ms", None, ""),
    ("edits: agents' worst prompts/get", ("storm", "agents", "max_ms"), "ms", TARGET_WORST_MS, "max"),
    ("edits: agents' p99", ("storm", "agents", "p99_ms"), "ms", None, ""),
    ("edits: agent requests > 100 ms", ("storm", "agents", "over_100ms"), "", None, ""),
    ("edits: PUT p50 during", ("storm", "put", "p50_ms"), "ms", None, ""),
    ("edits: last edit served after", ("storm", "last_edit_served_s"), "s", TARGET_LAST_EDIT_S, "max"),
    ("live import: agents' worst", ("live_import", "agents", "max_ms"), "ms", TARGET_WORST_MS, "max"),
    ("live import: agents' p99", ("live_import", "agents", "p99_ms"), "ms", None, ""),
    ("live import: agent requests > 100 ms", ("live_import", "agents", "over_100ms"), "", None, ""),
    ("live import: worst sent at (from start)", ("live_import", "agents", "worst_sent_at_s"), "s", None, ""),
    ("live import: CLI time", ("live_import", "import", "seconds"), "s", None, ""),
    ("live import: served after CLI exit", ("live_import", "served_after_import_exit_s"), "s", None, ""),
]


def verdicts(db: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for label, path, unit, target, sense in FIGURES:
        value = dig(db, *path)
        verdict = "—"
        if target is not None:
            if value is None:
                verdict = "MISS (not measured)"
            elif (sense == "min" and value >= target) or (sense == "max" and value <= target):
                verdict = "PASS"
            else:
                verdict = "MISS"
        rows.append(
            {"figure": label, "value": value, "unit": unit, "target": target, "sense": sense, "verdict": verdict}
        )
    return rows


def fmt(value: Any, unit: str) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        digits = 2 if abs(value) < 10 else (1 if abs(value) < 100 else 0)
        text = f"{value:,.{digits}f}"
    else:
        text = f"{value:,}"
    return f"{text} {unit}".strip()


def print_table(results: dict[str, Any]) -> None:
    databases = results["databases"]
    header = ["figure", "target", *[f"{db['database']} ({db['entries']:,})" for db in databases]]
    lines = [header]
    for i, (label, _path, unit, target, sense) in enumerate(FIGURES):
        target_text = "—" if target is None else ("≥ " if sense == "min" else "≤ ") + fmt(float(target), unit)
        cells = []
        for db in databases:
            row = db["figures"][i]
            verdict = "" if row["verdict"] == "—" else " " + row["verdict"].split()[0]
            cells.append(fmt(row["value"], unit) + verdict)
        lines.append([label, target_text, *cells])
    widths = [max(len(line[c]) for line in lines) for c in range(len(header))]
    print()
    print("| " + " | ".join(cell.ljust(widths[c]) for c, cell in enumerate(lines[0])) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for line in lines[1:]:
        print("| " + " | ".join(cell.ljust(widths[c]) for c, cell in enumerate(line)) + " |")
    for db in databases:
        for error in db["errors"]:
            print(f"{db['database']}: {error.splitlines()[0]}")
        for phase in ("storm", "live_import"):
            agents = dig(db, phase, "agents")
            if agents and agents.get("errors"):
                print(f"{db['database']} {phase}: {agents['errors']} agent errors, e.g. {agents['error_examples'][:2]}")
    git = results["git"]
    if not git["head"]:
        print("\n(not measured in a git checkout)")
    elif git["dirty"]:
        print(
            f"\ngit {git['head']} + uncommitted changes under registry/ and migrations/ (diff sha1 {git['dirty_sha1']})"
        )
    else:
        print(f"\ngit {git['head']} (clean)")


def git_state() -> dict[str, Any]:
    """HEAD and whether the code measured had uncommitted changes (other people edit it)."""

    def git(*a: str) -> str:
        with contextlib.suppress(Exception):
            return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
        return ""

    paths = ["registry", "migrations"]
    dirty = git("status", "--porcelain", "--", *paths)
    out: dict[str, Any] = {"head": git("rev-parse", "--short", "HEAD"), "dirty": bool(dirty)}
    if dirty:
        out["dirty_sha1"] = hashlib.sha1(git("diff", "HEAD", "--", *paths).encode()).hexdigest()[:12]
        out["changed"] = dirty.splitlines()[:40]
    return out


def load_average() -> list[float]:
    return list(os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--entries", type=int, default=100_000, help="prompts in the catalog (default 100,000)")
    ap.add_argument("--max-seconds", type=float, default=600.0, help="bound on each phase (default 600)")
    ap.add_argument("--agents", type=int, default=4, help="concurrent agent processes (default 4)")
    ap.add_argument("--agent-pause-ms", type=float, default=10.0, help="pause between an agent's requests")
    ap.add_argument("--get-samples", type=int, default=2000)
    ap.add_argument("--puts", type=int, default=50)
    ap.add_argument("--skip-live-import", action="store_true")
    ap.add_argument(
        "--pg-url",
        default=os.environ.get("REGISTRY_TEST_DATABASE_URL", DEFAULT_PG_URL),
        help="PostgreSQL server (a fresh schema is created there)",
    )
    ap.add_argument("--workdir", type=Path, help="work folder (kept; generated bundles are reused)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder and the PostgreSQL schema")
    ap.add_argument("--json", type=Path, help="write every figure as JSON here")
    args = ap.parse_args(argv)
    if args.entries < 10:
        ap.error("--entries must be at least 10")

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"work folder {workdir}")
    kinds = ["sqlite", "postgresql"] if args.database == "both" else [args.database]
    results: dict[str, Any] = {
        "benchmark": "scale",
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git": git_state(),
        "environment": environment.describe(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_before": load_average()},
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "pg_url"},
        "databases": [],
    }
    try:
        for kind in kinds:
            db = run_database(kind, workdir, args)
            db["figures"] = verdicts(db)
            db["load_after"] = load_average()
            results["databases"].append(db)
    finally:
        if args.workdir is None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    results["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
