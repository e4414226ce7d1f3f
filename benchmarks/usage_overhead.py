#!/usr/bin/env python3
"""Usage counting's cost: prompts/get throughput with counting on and off, side by side in one run.

Loads the benchmark catalog's 1,000 prompts (``mcp_throughput.py``'s, the peer's texts) into one
database, starts two ``mcp-registry serve`` processes on it, one with ``REGISTRY_USAGE=false`` and
one counting (flushing every ``--flush-s`` seconds), and drives them in turns (off, on, on, off,
...) with the load generator (``mcp_load.py``) for ``--rounds`` rounds of
``--duration`` seconds at ``--concurrency`` (``--paired``: both at once in each round). Prints
req/s per round side by side with each round's ratio on/off, the medians, and PASS/MISS for the
median of the rounds' ratios; then checks that the counting server counted every prompts/get it
answered (its counts are in the database once it has stopped). On a shared, noisy machine the
runs' req/s swing by tens of percent, so it also measures what noise hides: the server's CPU per
request on and off, the handler's CPU time in process (``McpServer.prompts_get``, counter off and
on in alternating batches) and one ``UsageCounter.count`` call. Writes everything to
``benchmarks/results/usage-<timestamp>.json``. Exits 0 whatever the figures.

Target (issue 11): prompts/get throughput with usage counting on within 5 % of it off.

    .venv/bin/python benchmarks/usage_overhead.py                      # SQLite, 3 rounds x 5 s, c=32
    .venv/bin/python benchmarks/usage_overhead.py --database postgresql --rounds 5
    .venv/bin/python benchmarks/usage_overhead.py --flush-s 1          # flushes every second: the worst case
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
import mcp_throughput as mt  # noqa: E402

from tests.serve_process import ServerProcess  # noqa: E402

METHOD = "prompts/get"
#: On may be at most this much slower than off (requests/s).
TARGET_RATIO = 0.95


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mt.ml.add_engine_argument(ap)
    ap.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    ap.add_argument("--pg-url", default=os.environ.get("REGISTRY_TEST_DATABASE_URL") or mt.DEFAULT_PG_URL)
    ap.add_argument("--rounds", type=int, default=3, help="off/on pairs (the order alternates)")
    ap.add_argument("--duration", type=int, default=5, help="seconds per load run")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=1, help="seconds of warm-up per server (0: none)")
    ap.add_argument(
        "--flush-s", type=float, default=10.0, help="REGISTRY_USAGE_FLUSH_S of the counting server (default: 10)"
    )
    ap.add_argument(
        "--paired",
        action="store_true",
        help="load both servers at the same time in each round (on a noisy machine both then meet the same noise; "
        "they share the cores, so req/s are about half) instead of one after the other",
    )
    ap.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--keep", action="store_true", help="keep the temporary data dir and the PostgreSQL schema")
    args = ap.parse_args(argv)
    args.engine = mt.ml.engine_for(args.engine)
    return args


def counted_uses(server: ServerProcess) -> int:
    """Every prompts/get use in the database (all hours), through the admin API."""
    with server.admin() as admin:
        answer = admin.get("/api/v1/usage", params={"group": "entry", "since": "2000-01-01T00:00:00Z", "limit": 1000})
        answer.raise_for_status()
        return sum(int(row["uses"]) for row in answer.json()["items"])


def count_cost_ns(calls: int = 200_000) -> float:
    """What one ``UsageCounter.count`` costs, in process, with 1,000 keys counted (as under load)."""
    from registry.catalog.usage import UsageCounter
    from registry.db.engine import Database

    counter = UsageCounter(Database("sqlite://"), flush_s=3600)
    names = [f"p{i:04d}" for i in range(1000)]
    count = counter.count
    started = time.perf_counter()
    for i in range(calls):
        count("prompt", names[i % 1000], 1, None, None, "get")
    return (time.perf_counter() - started) / calls * 1e9


def in_process_ab(data_dir: Path, url: str | None, *, rounds: int = 60, calls: int = 500) -> dict[str, Any]:
    """prompts/get through ``McpServer.prompts_get`` in this process, the counter off and on in
    alternating batches: the hot path's own cost, without HTTP and without other processes'
    noise in between (each batch's CPU time per call; medians over the batches)."""
    import asyncio
    import statistics

    from registry.catalog.usage import UsageCounter
    from registry.config import Settings
    from registry.mcp.server import McpServer, RequestContext
    from registry.mcp.sessions import ClientState
    from registry.runtime import Registry

    registry = Registry(Settings(data_dir=data_dir, database_url=url))
    try:
        server = McpServer(registry.catalog)
        counter = UsageCounter(registry.db, flush_s=3600)  # not started: the hot path alone
        ctx = RequestContext(client=ClientState(label="production", principal="bench"))
        params = [{"name": f"p{i:04d}", "arguments": {"topic": "caching", "audience": "SREs"}} for i in range(1000)]
        per_call: dict[str, list[float]] = {"off": [], "on": []}

        async def batch() -> float:
            # CPU time of this thread, not wall time: other processes taking the cores between
            # two batches (a shared machine) do not count.
            started = time.thread_time()
            for i in range(calls):
                await server.prompts_get(params[i % 1000], ctx)
            return (time.thread_time() - started) / calls * 1e6

        async def run() -> None:
            server.usage = None
            await batch()  # warm-up: snapshot built, templates compiled
            for rnd in range(rounds):
                for name in ("off", "on") if rnd % 2 == 0 else ("on", "off"):
                    server.usage = counter if name == "on" else None
                    per_call[name].append(await batch())
            await server.aclose()

        asyncio.run(run())
    finally:
        registry.close()
    off, on = statistics.median(per_call["off"]), statistics.median(per_call["on"])
    # Each round's two batches ran back to back: their ratio cancels the machine's slow drift.
    paired = statistics.median(b / a for a, b in zip(per_call["off"], per_call["on"], strict=True))
    return {"us_per_call": {"off": off, "on": on}, "batches": per_call, "ratio_on_off_time": paired}


def per_request_cpu_us(runs: list[dict[str, Any]]) -> float | None:
    """The server's CPU per answered request (microseconds), median over the runs."""
    values = [
        r["server_cpu_pct"] / 100 * r["seconds"] / r["requests"] * 1e6
        for r in runs
        if not r.get("failed") and r.get("requests") and "server_cpu_pct" in r
    ]
    return mt.median(values)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    prompts = [e for e in mt.catalog_entries("http://127.0.0.1:9/unused") if e[0] == "prompt"]
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    work = Path(tempfile.mkdtemp(prefix="usage-overhead-"))
    pg: mt.PgSchema | None = None
    servers: dict[str, mt.Server] = {}
    try:
        url: str | None = None
        if args.database == "postgresql":
            pg = mt.PgSchema(args.pg_url)
            url = pg.create()
        data_dir = work / "data"
        mt.log(f"{args.database}: loaded {len(prompts)} prompts in {mt.load_catalog(data_dir, url, prompts):.1f} s")
        admin_token = secrets.token_hex(16)
        database_args = ["--database-url", url] if url else []
        for name, env in (
            ("off", {"REGISTRY_USAGE": "false"}),
            ("on", {"REGISTRY_USAGE": "true", "REGISTRY_USAGE_FLUSH_S": str(args.flush_s)}),
        ):
            process = ServerProcess(
                data_dir,
                admin_token=admin_token,
                env=env,
                args=["--data-dir", str(data_dir), *database_args],
                cwd=work,
                log_path=work / f"{name}.log",
                bare=True,
                name=f"usage-{name}",
            )
            servers[name] = mt.Server(name, "registry", process.start(wait=False))
        for server in servers.values():
            server.process.wait_ready(timeout=mt.READY_TIMEOUT_S)
        mt.log("servers: " + ", ".join(f"{s.name} :{s.port} pid {s.process.pid}" for s in servers.values()))

        runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
        sent_to_on = 0  # prompts/get answered by the counting server: load runs plus their pre-flights

        def load(name: str, concurrency: int, seconds: int) -> dict[str, Any]:
            nonlocal sent_to_on
            result = mt.mcp_load(args, servers[name], METHOD, concurrency, seconds)
            if name == "on" and not result.get("failed"):
                sent_to_on += int(result.get("ok", 0)) + concurrency  # one pre-flight per session
            return result

        if args.warmup > 0:
            for name in ("off", "on"):
                load(name, 8, args.warmup)
        t0 = time.monotonic()
        for rnd in range(args.rounds):
            order = ("off", "on") if rnd % 2 == 0 else ("on", "off")
            if args.paired:
                with ThreadPoolExecutor(2) as pool:
                    futures = {name: pool.submit(load, name, args.concurrency, args.duration) for name in order}
                answers = [(name, futures[name].result()) for name in order]
            else:
                answers = [(name, load(name, args.concurrency, args.duration)) for name in order]
            for name, result in answers:
                result["round"] = rnd
                runs[name].append(result)
                mt.log(
                    f"[{time.monotonic() - t0:4.0f}s] round {rnd} usage {name:3}: {mt.fmt(result.get('rps'))} req/s  "
                    f"p99 {mt.fmt(result.get('p99_ms'), '.2f')} ms  errors {result.get('errors', '-')}  "
                    f"server CPU {mt.fmt(result.get('server_cpu_pct'))}%  other CPU {mt.fmt(mt.other_cpu(result))}%"
                    if not result.get("failed")
                    else f"round {rnd} usage {name}: FAILED"
                )
        summary = {name: mt.summarize(rs) for name, rs in runs.items()}

        # Every use the counting server answered is in the database once it has stopped (SIGTERM
        # writes what is pending), read back through the other server's admin API.
        servers["on"].process.stop(timeout=mt.STOP_TIMEOUT_S)
        counted = counted_uses(servers["off"].process)

        ratio = mt.ratio(summary["on"]["rps"], summary["off"]["rps"])
        per_round = [mt.ratio(on.get("rps"), off.get("rps")) for off, on in zip(runs["off"], runs["on"], strict=False)]
        # The verdict is on the median of the rounds' own ratios: each round's two runs are back to
        # back, so a slow minute of the machine weighs on both (the ratio of the two medians mixes
        # runs minutes apart; it is shown too).
        paired = mt.median([r for r in per_round if r is not None])
        verdict = "PASS" if paired is not None and paired >= TARGET_RATIO else "MISS"
        print()
        mode = "at the same time" if args.paired else "one after the other"
        print(f"prompts/get, c={args.concurrency}, {args.rounds} rounds x {args.duration} s ({mode}), ", end="")
        print(f"{args.database}, ", end="")
        print(f"flush every {args.flush_s:g} s")
        print(f"{'round':>6} {'off req/s':>10} {'on req/s':>10} {'on/off':>7}")
        for rnd, (off, on) in enumerate(zip(runs["off"], runs["on"], strict=False)):
            print(
                f"{rnd:>6} {mt.fmt(off.get('rps')):>10} {mt.fmt(on.get('rps')):>10} {mt.fmt(per_round[rnd], '.3f'):>7}"
            )
        print(
            f"{'median':>6} {mt.fmt(summary['off']['rps']):>10} {mt.fmt(summary['on']['rps']):>10} "
            f"{mt.fmt(ratio, '.3f'):>7}   (ratio of the medians)"
        )
        print(f"median of the rounds' on/off: {mt.fmt(paired, '.3f')}   target >= {TARGET_RATIO}: {verdict}")
        print(
            f"p99 ms: off {mt.fmt(summary['off']['p99_ms'], '.2f')}, on {mt.fmt(summary['on']['p99_ms'], '.2f')}; "
            f"other processes' CPU (median, % of a core): off {mt.fmt(summary['off']['other_cpu_pct'])}, "
            f"on {mt.fmt(summary['on']['other_cpu_pct'])}"
        )
        # wrk stops with up to c requests in flight: the server answered (and counted) them, wrk
        # did not read the answers. So the count may exceed what wrk saw by at most c per run.
        in_flight = args.concurrency * args.rounds + (8 if args.warmup > 0 else 0)
        matches = sent_to_on <= counted <= sent_to_on + in_flight
        print(f"uses counted by the 'on' server: {counted:,}; prompts/get answers wrk read from it: {sent_to_on:,}")
        print(
            f"  {'OK' if matches else 'WRONG'}: the difference ({counted - sent_to_on:,}) is at most the requests in "
            f"flight when its load runs ended ({in_flight:,})"
        )
        ab = in_process_ab(data_dir, url)
        times = ab["us_per_call"]
        print(
            f"in process (McpServer.prompts_get, alternating batches, CPU time): off {times['off']:.1f} us, "
            f"on {times['on']:.1f} us per call (medians); on/off per round, median: {ab['ratio_on_off_time']:.3f}"
        )
        cost_ns = count_cost_ns()
        cpu_us = per_request_cpu_us(runs["on"])
        cpu_off_us = per_request_cpu_us(runs["off"])
        # Less sensitive to other processes than requests/s: what each request cost the server.
        print(
            f"server CPU per prompts/get (median): off {mt.fmt(cpu_off_us)} us, on {mt.fmt(cpu_us)} us, "
            f"on/off {mt.fmt(mt.ratio(cpu_us, cpu_off_us), '.3f')}"
        )
        share = 100 * cost_ns / 1000 / cpu_us if cpu_us else None
        print(
            f"UsageCounter.count(): {cost_ns:.0f} ns per call (in process, 1,000 keys); one prompts/get costs the "
            f"server {mt.fmt(cpu_us)} us of CPU: counting is {mt.fmt(share, '.3f')} % of it"
        )

        results = {
            "started_at": stamp,
            "config": {
                "database": args.database,
                "rounds": args.rounds,
                "duration_s": args.duration,
                "concurrency": args.concurrency,
                "warmup_s": args.warmup,
                "flush_s": args.flush_s,
                "paired": args.paired,
            },
            "environment": mt.environment.describe(),
            "runs": runs,
            "summary": summary,
            "ratio_of_medians": ratio,
            "ratio_median_of_rounds": paired,
            "ratio_per_round": per_round,
            "target_ratio": TARGET_RATIO,
            "verdict": verdict,
            "counted_uses": counted,
            "answered_by_on": sent_to_on,
            "counts_match": matches,
            "in_process": ab,
            "count_cost_ns": cost_ns,
            "request_cpu_us": {"on": cpu_us, "off": cpu_off_us},
        }
        args.results_dir.mkdir(parents=True, exist_ok=True)
        out = args.results_dir / f"usage-{stamp}.json"
        out.write_text(json.dumps(results, indent=2, sort_keys=True, default=str))
        print(f"wrote {out}")
        return 0
    except httpx.HTTPError as exc:
        raise SystemExit(f"error: {exc}") from None
    finally:
        for server in servers.values():
            server.process.stop(timeout=mt.STOP_TIMEOUT_S)
        if pg is not None and not args.keep:
            try:
                pg.drop()
            except Exception as exc:
                mt.log(f"could not drop schema {pg.schema}: {exc}")
        if args.keep:
            mt.log(f"kept {work}" + (f" and schema {pg.schema}" if pg else ""))
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
