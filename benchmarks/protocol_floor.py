#!/usr/bin/env python3
"""What this machine does with no application work at all: the floor under every figure.

Alternates load runs, in one sitting, against two servers that answer the same fixed JSON-RPC
result (``../shared/bench/ceiling_server.py``'s, the size of a prompts/get answer, echoing the
request id) and do nothing else:

- ``ceiling``: the shared bare ASGI app on uvicorn + uvloop + httptools (``mcp_throughput.py``'s
  ceiling): an ASGI task, scope and receive/send messages per request;
- ``floor``: ``registry.serving.HttpProtocol`` answering from its immediate route, as the registry
  answers a cached prompts/get: no ASGI machinery.

The floor's requests/s is what an app costs nothing above; its p99 at c=1 is the latency tail
the machine itself adds (scheduling, the load generator on the same two cores), which no server
on this box can go below. ``mcp_throughput.py``'s c=1 p99 targets are read against it.

    .venv/bin/python benchmarks/protocol_floor.py --rounds 3 --duration 5
    .venv/bin/python benchmarks/protocol_floor.py --serve PORT     # the floor server alone
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "bench"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def serve(port: int) -> None:
    """The floor server: a fixed answer (the ceiling's) from ``HttpProtocol``'s immediate route."""
    sys.path.insert(0, str(SHARED))
    import ceiling_server
    import uvicorn

    from registry.mcp.http_common import ImmediateAnswer
    from registry.serving import HttpProtocol

    json_content = [(b"content-type", b"application/json")]

    def answer_now(headers: list[tuple[bytes, bytes]], body: bytes) -> ImmediateAnswer:
        status, payload, extra = ceiling_server._answer("POST", body)
        return status, json_content + extra, payload, None

    class Floor:
        def immediate_route(self, raw_path: bytes) -> Any:
            return answer_now

        async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return
            await send({"type": "http.response.start", "status": 405, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})

    uvicorn.run(
        Floor(),
        host="127.0.0.1",
        port=port,
        http=HttpProtocol,
        loop="uvloop",
        lifespan="off",
        log_level="warning",
        access_log=False,
        backlog=4096,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve", type=int, metavar="PORT", help="run the floor server alone on PORT")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--method", default="prompts/get")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--shared", type=Path, default=SHARED, help="the shared measuring tools")
    args = ap.parse_args()
    if args.serve:
        serve(args.serve)
        return 0

    from mcp_throughput import Server, ceiling_command, ensure_wrk, log, mcp_load, reference_process

    ensure_wrk()
    work = Path(tempfile.mkdtemp(prefix="protocol-floor-"))
    commands = {
        "ceiling": lambda port: ceiling_command(args.shared, port),
        "floor": lambda port: [sys.executable, __file__, "--serve", str(port)],
    }
    servers = []
    for name, command in commands.items():
        servers.append(Server(name, name, reference_process(name, command, work).start()))
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    try:
        for concurrency in args.concurrency:
            for server in servers:  # warm-up
                mcp_load(args, server, args.method, concurrency, 1)
            for n in range(args.rounds):
                for server in servers:  # alternating: both see the same box, round by round
                    result = mcp_load(args, server, args.method, concurrency, args.duration)
                    if result.get("failed") or result.get("errors"):
                        log(f"{server.name} c={concurrency}: {result}")
                        return 1
                    results.setdefault((server.name, concurrency), []).append(result)
                    log(
                        f"{server.name:8} c={concurrency:<3} r{n}: {result['rps']:8.0f} req/s  p50 "
                        f"{result['p50_ms']:.3f} ms  p99 {result['p99_ms']:.3f} ms  wrk {result['gen_cpu_pct']:.0f} %"
                    )
    finally:
        for server in servers:
            server.process.stop()

    print(f"\n== {args.method}: medians of {args.rounds} rounds x {args.duration} s ==")
    print(f"{'server':8} {'c':>3} | {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} | rounds' p99 ms")
    for concurrency in args.concurrency:
        for server in servers:
            runs = results[(server.name, concurrency)]
            rps = statistics.median(r["rps"] for r in runs)
            p50 = statistics.median(r["p50_ms"] for r in runs)
            p99 = statistics.median(r["p99_ms"] for r in runs)
            each = ", ".join(f"{r['p99_ms']:.2f}" for r in runs)
            print(f"{server.name:8} {concurrency:>3} | {rps:8.0f} {p50:7.3f} {p99:7.3f} | {each}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
