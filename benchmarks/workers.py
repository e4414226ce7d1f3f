#!/usr/bin/env python3
"""``serve --workers 2`` against ``--workers 1``: prompts/get throughput, side by side in one run.

Loads the benchmark catalog (as ``mcp_throughput.py`` does) into one SQLite database,
starts ``mcp-registry serve --workers 1`` and ``--workers 2`` on it, and alternates load runs
(1, 2, 1, 2, ...) with ``mcp_load.py`` at one concurrency. Reports the medians, the ratio,
the CPU of every server process (the supervisor's workers summed) and the load generator's own
CPU: on a 2-core machine the load generator takes part of the cores the workers would use, so the ratio is
bounded by what is left, and the figure says how much that was.

    .venv/bin/python benchmarks/workers.py --rounds 3 --duration 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
import environment  # noqa: E402
import mcp_load as ml  # noqa: E402
from mcp_throughput import (  # noqa: E402
    Server,
    catalog_entries,
    load_catalog,
    log,
    mcp_load,
)

from tests.serve_process import ServerProcess  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its live children (the workers of a supervisor)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat.parent.name) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def run_once(args: argparse.Namespace, server: Server, duration: int) -> dict[str, Any]:
    before, t0 = tree_cpu_s(server.process.pid), time.monotonic()
    result = mcp_load(args, server, args.method, args.concurrency, duration)
    result["tree_cpu_pct"] = 100 * (tree_cpu_s(server.process.pid) - before) / (time.monotonic() - t0)
    return result


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ml.add_engine_argument(ap)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--method", default="prompts/get", choices=["prompts/get", "resources/read", "tools/list"])
    ap.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    args.engine = ml.engine_for(args.engine)
    env = environment.describe()
    log(environment.headline(env) + f" | load generator: {args.engine}")
    work = Path(tempfile.mkdtemp(prefix="mcp-workers-"))
    servers: list[Server] = []
    try:
        entries = catalog_entries("http://127.0.0.1:9/echo")
        data_dir = work / "data"
        log(f"loaded {len(entries)} entries in {load_catalog(data_dir, None, entries):.1f} s")
        for count in (1, 2):
            process = ServerProcess(
                data_dir,
                admin_token="workers-bench-admin",
                args=["--data-dir", str(data_dir), "--workers", str(count)],
                cwd=work,
                log_path=work / f"workers-{count}.log",
                bare=True,
                name=f"workers-{count}",
            )
            servers.append(Server(f"workers-{count}", "registry", process.start()))
        for server in servers:  # warm-up: snapshots built, templates compiled, in every worker
            mcp_load(args, server, args.method, args.concurrency, 2)
        runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in servers}
        for round_no in range(args.rounds):
            for server in servers:
                result = run_once(args, server, args.duration)
                runs[server.name].append(result)
                log(
                    f"round {round_no + 1} {server.name}: {result.get('rps', 0):.0f} req/s, p99 "
                    f"{result.get('p99_ms', 0):.2f} ms, server CPU {result['tree_cpu_pct']:.0f}%, "
                    f"generator CPU {result.get('gen_cpu_pct', 0):.0f}%, "
                    f"box {result.get('box_busy_pct_of_2cores', 0):.0f}%"
                )
        summary = {}
        for name, results in runs.items():
            ok = [r for r in results if not r.get("failed")]
            summary[name] = {
                key: median([r[key] for r in ok if key in r])
                for key in ("rps", "p50_ms", "p99_ms", "tree_cpu_pct", "gen_cpu_pct", "box_busy_pct_of_2cores")
            }
            summary[name]["rps_all"] = [round(r["rps"], 1) for r in ok]
        one, two = summary["workers-1"], summary["workers-2"]
        ratio = two["rps"] / one["rps"] if one["rps"] and two["rps"] else None
        print(f"\n== {args.method} c={args.concurrency}, SQLite, {args.rounds} rounds x {args.duration} s (medians) ==")
        print(f"{'':10} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'server CPU':>10} {'gen CPU':>8} {'box busy':>9}")
        for name, s in summary.items():
            print(
                f"{name:10} {s['rps']:8.0f} {s['p50_ms']:7.2f} {s['p99_ms']:7.2f} {s['tree_cpu_pct']:9.0f}% "
                f"{s['gen_cpu_pct']:7.0f}% {s['box_busy_pct_of_2cores']:8.0f}%"
            )
        print(f"ratio workers-2 / workers-1: {ratio:.2f}" if ratio else "ratio: -")
        print("(CPU in % of one core; box busy in % of all cores; gen: the load generator)")
        args.results_dir.mkdir(parents=True, exist_ok=True)
        out = args.results_dir / f"workers-{time.strftime('%Y%m%d-%H%M%S')}.json"
        out.write_text(
            json.dumps({"environment": env, "summary": summary, "ratio": ratio, "runs": runs}, indent=2, default=str)
        )
        print(f"wrote {out}")
        return 0
    finally:
        for server in servers:
            server.process.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
