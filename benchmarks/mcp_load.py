#!/usr/bin/env python3
"""MCP Streamable HTTP load generator: one JSON-RPC method, C agents, D seconds, every answer checked.

1. The MCP handshake for S sessions (standard library ``http.client``): ``initialize``, the
   ``Mcp-Session-Id`` from its answer, ``notifications/initialized`` (202 expected).
2. A pre-flight: one request of the method per session, parsed and checked in full.
3. The load, with one of two engines:

   - ``py``: asyncio raw-socket HTTP/1.1 keep-alive clients (on uvloop when installed) in
     ``--procs`` forked processes; every answer is ``json.loads``-ed and its id checked. It needs
     nothing beyond this repository's venv.
   - ``wrk``: wrk (C, epoll) with a generated Lua script that checks each answer for HTTP 200 and a
     JSON-RPC result (JSON body, or the ``data:`` line of an SSE body). It costs a fraction of the
     CPU the Python engine does, which matters on a 2-core machine where the load generator
     shares the cores with the server.

   ``auto`` (the default) uses wrk when it is on PATH and the Python engine otherwise; the result
   says which. Each request has a unique JSON-RPC id (the SDK routes SSE answers by id) and the
   requests rotate over the sessions.
4. The sessions are DELETEd.

Prints requests/s, p50/p99 latency, errors, the CPU of the generator (and of ``--server-pid``) over
the measured window; the LAST line is ``RESULT {json}``.

    .venv/bin/python benchmarks/mcp_load.py --url http://127.0.0.1:8101/mcp --method prompts/get -d 5 -c 32
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from bench_catalog import AUDIENCE, N_PROMPTS, N_RESOURCES, TOPIC

ACCEPT = "application/json, text/event-stream"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
METHODS = ("prompts/get", "prompts/list", "resources/read", "tools/call", "ping", "tools/list", "resources/list")


# --------------------------------------------------------------------------- JSON-RPC
def jsonrpc_messages(content_type: str, body: bytes) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a response body: JSON, or the ``data:`` lines of SSE events."""
    if (content_type or "").lower().startswith("text/event-stream"):
        messages, data = [], []
        for line in [*body.decode("utf-8").splitlines(), ""]:
            if line.startswith("data:"):
                data.append(line[6:] if line[5:6] == " " else line[5:])
            elif line == "" and data:
                if "\n".join(data).strip():
                    messages.append(json.loads("\n".join(data)))
                data = []
        return messages
    if not body:
        return []
    message = json.loads(body)
    return message if isinstance(message, list) else [message]


def params_for(method: str, i: int = 42) -> dict[str, Any] | None:
    if method == "prompts/get":
        return {"name": f"p{i % N_PROMPTS:04d}", "arguments": {"topic": TOPIC, "audience": AUDIENCE}}
    if method == "resources/read":
        return {"uri": f"res://static/r{i % N_RESOURCES:04d}"}
    if method == "tools/call":
        return {"name": "echo", "arguments": {"text": "hello world"}}
    if method == "ping":
        return None
    return {}


def rpc_body(method: str, rid: int, i: int = 42) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    params = params_for(method, i)
    if params is not None:
        message["params"] = params
    return json.dumps(message, separators=(",", ":")).encode()


# --------------------------------------------------------------------------- CPU accounting
def process_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def box_idle() -> tuple[int, int]:
    """(idle + iowait, total) ticks of the whole machine."""
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    return values[3] + values[4], sum(values)


# --------------------------------------------------------------------------- handshake
class Http:
    """A keep-alive HTTP client for the handshake, the pre-flight and the teardown."""

    def __init__(self, url: str, timeout: float = 30) -> None:
        parts = urlsplit(url)
        self.path = parts.path or "/"
        self.conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout)

    def req(self, verb: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        sent = {"Accept": ACCEPT, **headers}
        if body is not None:
            sent["Content-Type"] = "application/json"
        self.conn.request(verb, self.path, body=body, headers=sent)
        response = self.conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data

    def close(self) -> None:
        self.conn.close()


def handshake(client: Http, version: str) -> tuple[str | None, float, dict[str, Any]]:
    """``initialize`` + ``notifications/initialized``: (session id, seconds, initialize result)."""
    t0 = time.perf_counter()
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "mcp_load", "version": "1"}},
    }
    status, headers, body = client.req("POST", json.dumps(init).encode(), {})
    if status != 200:
        raise RuntimeError(f"initialize -> HTTP {status}: {body[:300]!r}")
    result = next((m for m in jsonrpc_messages(headers.get("content-type", ""), body) if m.get("id") == 0), None)
    if not result or "result" not in result:
        raise RuntimeError(f"initialize: no result in {body[:300]!r}")
    sid = headers.get("mcp-session-id")
    sent = {"MCP-Protocol-Version": result["result"].get("protocolVersion", version)}
    if sid:
        sent["Mcp-Session-Id"] = sid
    status, _, body = client.req("POST", b'{"jsonrpc":"2.0","method":"notifications/initialized"}', sent)
    if status != 202:
        raise RuntimeError(f"notifications/initialized -> HTTP {status}: {body[:200]!r}")
    return sid, time.perf_counter() - t0, result["result"]


# --------------------------------------------------------------------------- the wrk engine
LUA = r"""
local sessions = {%(sessions)s}
local nsess = #sessions
local pv = "%(pv)s"
local path = "%(path)s"
local method = "%(method)s"
local threads = {}
local nthreads = 0

function setup(thread)
  thread:set("tid", nthreads)
  nthreads = nthreads + 1
  table.insert(threads, thread)
end

function init(args)
  counter = 0
  ok = 0
  bad = 0
  badstatus = 0
  sample = ""
  hdrs = {}
  for i = 1, nsess do
    local h = {}
    h["Accept"] = "application/json, text/event-stream"
    h["Content-Type"] = "application/json"
    h["MCP-Protocol-Version"] = pv
    if sessions[i] ~= "" then h["Mcp-Session-Id"] = sessions[i] end
    hdrs[i] = h
  end
end

local function body_for(id, i)
  if method == "prompts/get" then
    return string.format('{"jsonrpc":"2.0","id":%%d,"method":"prompts/get","params":{"name":"p%%04d",' ..
      '"arguments":{"topic":"%(topic)s","audience":"%(audience)s"}}}', id, i %% 1000)
  elseif method == "resources/read" then
    return string.format('{"jsonrpc":"2.0","id":%%d,"method":"resources/read",' ..
      '"params":{"uri":"res://static/r%%04d"}}', id, i %% 1000)
  elseif method == "tools/call" then
    return string.format('{"jsonrpc":"2.0","id":%%d,"method":"tools/call",' ..
      '"params":{"name":"echo","arguments":{"text":"hello world"}}}', id)
  elseif method == "ping" then
    return string.format('{"jsonrpc":"2.0","id":%%d,"method":"ping"}', id)
  else
    return string.format('{"jsonrpc":"2.0","id":%%d,"method":"%%s","params":{}}', id, method)
  end
end

function request()
  counter = counter + 1
  local id = tid * 1000000000 + counter
  local si = ((counter + tid) %% nsess) + 1
  return wrk.format("POST", path, hdrs[si], body_for(id, counter))
end

function response(status, headers, body)
  if status ~= 200 then
    badstatus = badstatus + 1
    if sample == "" then sample = tostring(status) .. " " .. string.sub(body, 1, 200) end
    return
  end
  local payload = body
  if string.byte(body, 1) ~= 123 then  -- not '{': SSE, take the 'data:' line with the answer
    local s, e = string.find(body, "data: {", 1, true)
    if not s then
      bad = bad + 1
      if sample == "" then sample = string.sub(body, 1, 200) end
      return
    end
    local eol = string.find(body, "\n", e, true) or (#body + 1)
    payload = string.sub(body, e, eol - 1)
  end
  if string.find(payload, '"jsonrpc":"2.0"', 1, true) and string.find(payload, '"result":', 1, true)
     and not string.find(payload, '"error":{', 1, true) then
    ok = ok + 1
  else
    bad = bad + 1
    if sample == "" then sample = string.sub(body, 1, 200) end
  end
end

function done(summary, latency, requests)
  local tok, tbad, tbs, samp = 0, 0, 0, ""
  for _, t in ipairs(threads) do
    tok = tok + t:get("ok")
    tbad = tbad + t:get("bad")
    tbs = tbs + t:get("badstatus")
    local s = t:get("sample")
    if samp == "" and s ~= nil then samp = s end
  end
  local e = summary.errors
  samp = string.gsub(samp, '[%%c"\\]', ' ')
  io.write(string.format('WRKJSON {"requests":%%d,"duration_us":%%d,"ok":%%d,"invalid":%%d,"bad_status":%%d,' ..
    '"err_connect":%%d,"err_read":%%d,"err_write":%%d,"err_timeout":%%d,' ..
    '"lat_mean_us":%%.1f,"lat_p50_us":%%d,"lat_p90_us":%%d,"lat_p99_us":%%d,"lat_max_us":%%d,"sample":"%%s"}\n',
    summary.requests, summary.duration, tok, tbad, tbs, e.connect, e.read, e.write, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, samp))
end
"""


def run_wrk(args: argparse.Namespace, sessions: list[str], mark: Callable[[], None]) -> dict[str, Any]:
    lua = LUA % {
        "sessions": ",".join(f'"{s}"' for s in sessions),
        "pv": args.protocol_version,
        "path": urlsplit(args.url).path or "/",
        "method": args.method,
        "topic": TOPIC,
        "audience": AUDIENCE,
    }
    fd, script = tempfile.mkstemp(prefix="mcp_load_", suffix=".lua")
    with os.fdopen(fd, "w") as f:
        f.write(lua)
    threads = max(1, min(args.threads, args.concurrency))
    duration = max(1, round(args.duration))
    command = ["wrk", "-t", str(threads), "-c", str(args.concurrency), "-d", f"{duration}s"]
    command += ["--timeout", f"{args.timeout}s", "-s", script, args.url]
    mark()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    os.unlink(script)
    found = re.search(r"^WRKJSON (.*)$", out, re.M)
    if not found:
        raise RuntimeError(f"wrk failed rc={proc.returncode}:\n{out}")
    w = json.loads(found.group(1))
    seconds = w["duration_us"] / 1e6
    detail = {k: w[k] for k in ("invalid", "bad_status", "err_connect", "err_read", "err_write", "err_timeout")}
    return {
        "engine": "wrk",
        "wrk_threads": threads,
        "requests": w["requests"],
        "seconds": seconds,
        "rps": w["requests"] / seconds if seconds else 0.0,
        "ok": w["ok"],
        "errors": sum(detail.values()),
        "p50_ms": w["lat_p50_us"] / 1000,
        "p90_ms": w["lat_p90_us"] / 1000,
        "p99_ms": w["lat_p99_us"] / 1000,
        "max_ms": w["lat_max_us"] / 1000,
        "mean_ms": w["lat_mean_us"] / 1000,
        "gen_cpu_s": usage.ru_utime + usage.ru_stime,
        "err_detail": detail,
        "error_sample": w.get("sample", ""),
    }


# --------------------------------------------------------------------------- the Python engine
class _Agent(asyncio.Protocol):
    """One keep-alive connection sending the method again as soon as each answer is in."""

    def __init__(self, worker: _Worker, sid: str, number: int) -> None:
        self.worker, self.number, self.sent = worker, number, 0
        self.buf = bytearray()
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        head = (
            f"POST {worker.path} HTTP/1.1\r\nHost: {worker.host}:{worker.port}\r\nAccept: {ACCEPT}\r\n"
            f"Content-Type: application/json\r\nMCP-Protocol-Version: {worker.version}\r\n"
        )
        if sid:
            head += f"Mcp-Session-Id: {sid}\r\n"
        self.head = head.encode()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.send()

    def send(self) -> None:
        self.sent += 1
        self.rid = (self.worker.number * 10_000 + self.number) * 1_000_000 + self.sent
        body = rpc_body(self.worker.method, self.rid, self.sent)
        self.t0 = time.perf_counter()
        self.transport.write(self.head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        answer = self.take_answer()
        if answer is None:
            return
        self.worker.latencies.append(time.perf_counter() - self.t0)
        self.worker.check(self.rid, *answer)
        if time.perf_counter() < self.worker.deadline:
            self.send()
        else:
            self.transport.close()

    def take_answer(self) -> tuple[int, str, bytes] | None:
        """(status, content type, body) once a whole response is in the buffer (Content-Length or chunked)."""
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return None
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        start = end + 4
        if "content-length" in headers:
            stop = start + int(headers["content-length"])
            if len(self.buf) < stop:
                return None
            body = bytes(self.buf[start:stop])
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            chunks, stop = bytearray(), start
            while True:
                eol = self.buf.find(b"\r\n", stop)
                if eol < 0:
                    return None
                size = int(bytes(self.buf[stop:eol]).split(b";")[0], 16)
                if len(self.buf) < eol + 2 + size + 2:
                    return None
                chunks += self.buf[eol + 2 : eol + 2 + size]
                stop = eol + 2 + size + 2
                if size == 0:
                    break
            body = bytes(chunks)
        else:
            body, stop = b"", start
        del self.buf[:stop]
        return int(lines[0].split(" ", 2)[1]), headers.get("content-type", ""), body

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self.worker.stats["conn_err"] += 1
        if not self.done.done():
            self.done.set_result(None)


class _Worker:
    """One process's share of the agents, and what they saw."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.__dict__.update(config)
        self.latencies: list[float] = []
        self.stats = {"ok": 0, "invalid": 0, "bad_status": 0, "conn_err": 0}
        self.sample = ""
        self.deadline = 0.0

    def check(self, rid: int, status: int, content_type: str, body: bytes) -> None:
        if status != 200:
            self.stats["bad_status"] += 1
            self.sample = self.sample or f"{status} {body[:200]!r}"
            return
        try:
            messages = jsonrpc_messages(content_type, body)
            good = any(m.get("jsonrpc") == "2.0" and m.get("id") == rid and "result" in m for m in messages)
        except ValueError:
            good = False
        if good:
            self.stats["ok"] += 1
        else:
            self.stats["invalid"] += 1
            self.sample = self.sample or repr(body[:200])

    async def run(self) -> float:
        loop = asyncio.get_running_loop()
        while time.time() < self.start_at:
            await asyncio.sleep(0.001)
        self.deadline = time.perf_counter() + self.duration
        t0 = time.perf_counter()
        agents = []
        for number, sid in enumerate(self.sessions):
            _, agent = await loop.create_connection(lambda s=sid, n=number: _Agent(self, s, n), self.host, self.port)
            agents.append(agent)
        await asyncio.gather(*(agent.done for agent in agents))
        return time.perf_counter() - t0


def _py_process(config: dict[str, Any], queue: Any) -> None:
    worker = _Worker(config)
    try:
        import uvloop

        elapsed = uvloop.run(worker.run())
    except ImportError:
        elapsed = asyncio.run(worker.run())
    queue.put({"lat": worker.latencies, "elapsed": elapsed, "sample": worker.sample, **worker.stats})


def run_py(args: argparse.Namespace, sessions: list[str], mark: Callable[[], None]) -> dict[str, Any]:
    parts = urlsplit(args.url)
    procs = max(1, min(args.procs, args.concurrency))
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    start_at = time.time() + 0.5
    workers = []
    for w in range(procs):
        config = {
            "number": w + 1,
            "host": parts.hostname,
            "port": parts.port or 80,
            "path": parts.path or "/",
            "version": args.protocol_version,
            "method": args.method,
            "duration": args.duration,
            "start_at": start_at,
            "sessions": [sessions[i % len(sessions)] for i in range(w, args.concurrency, procs)],
        }
        process = context.Process(target=_py_process, args=(config, queue))
        process.start()
        workers.append(process)
    while time.time() < start_at:
        time.sleep(0.0005)
    mark()
    results = [queue.get() for _ in workers]
    cpu = 0.0
    for process in workers:
        _, _, usage = os.wait4(process.pid, 0)
        cpu += usage.ru_utime + usage.ru_stime
    latencies = sorted(x for r in results for x in r["lat"])
    elapsed = max(r["elapsed"] for r in results)
    n = len(latencies)

    def pct(p: float) -> float:
        return latencies[min(n - 1, int(p / 100 * n))] * 1000 if n else 0.0

    detail = {k: sum(r[k] for r in results) for k in ("invalid", "bad_status", "conn_err")}
    return {
        "engine": "py",
        "procs": procs,
        "requests": n,
        "seconds": elapsed,
        "rps": n / elapsed if elapsed else 0.0,
        "ok": sum(r["ok"] for r in results),
        "errors": sum(detail.values()),
        "p50_ms": pct(50),
        "p90_ms": pct(90),
        "p99_ms": pct(99),
        "max_ms": latencies[-1] * 1000 if n else 0.0,
        "mean_ms": sum(latencies) / n * 1000 if n else 0.0,
        "gen_cpu_s": cpu,
        "err_detail": detail,
        "error_sample": next((r["sample"] for r in results if r["sample"]), ""),
    }


# --------------------------------------------------------------------------- main
def add_engine_argument(ap: argparse.ArgumentParser) -> None:
    """``--engine`` for every script that drives this load generator."""
    ap.add_argument(
        "--engine",
        choices=["auto", "wrk", "py"],
        default="auto",
        help="load generator engine: wrk (C, cheap on CPU) or py (asyncio, needs nothing else); auto: wrk if on PATH",
    )


def engine_for(choice: str) -> str:
    """The engine to use for ``choice``: ``auto`` resolved, ``wrk`` refused when it is not installed."""
    if choice == "auto":
        return "wrk" if shutil.which("wrk") else "py"
    if choice == "wrk" and not shutil.which("wrk"):
        raise SystemExit("error: --engine wrk but wrk is not on PATH (apt-get install wrk, or --engine py)")
    return choice


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8101/mcp")
    ap.add_argument("--method", default="prompts/get", choices=METHODS)
    ap.add_argument("-d", "--duration", type=float, default=10)
    ap.add_argument("-c", "--concurrency", type=int, default=32)
    ap.add_argument("--sessions", type=int, default=0, help="MCP sessions the requests rotate over (default: C)")
    ap.add_argument("--protocol-version", default="2025-11-25")
    add_engine_argument(ap)
    ap.add_argument("--threads", type=int, default=1, help="wrk threads")
    ap.add_argument("--procs", type=int, default=1, help="processes of the Python engine")
    ap.add_argument("--timeout", type=float, default=10, help="wrk's request timeout, seconds")
    ap.add_argument("--server-pid", type=int, default=0, help="report this process's CPU over the run")
    ap.add_argument("--label", default="")
    args = ap.parse_args(argv)
    args.engine = engine_for(args.engine)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    count = args.sessions or args.concurrency
    client = Http(args.url)
    sessions, handshakes = [], []
    init: dict[str, Any] = {}
    for _ in range(count):
        sid, seconds, init = handshake(client, args.protocol_version)
        sessions.append(sid or "")
        handshakes.append(seconds)
    content_type, size = "", 0
    for i, sid in enumerate(sessions):
        headers = {"MCP-Protocol-Version": args.protocol_version, **({"Mcp-Session-Id": sid} if sid else {})}
        status, got, body = client.req("POST", rpc_body(args.method, 10_000 + i), headers)
        messages = jsonrpc_messages(got.get("content-type", ""), body) if status == 200 else []
        if not any(m.get("id") == 10_000 + i and "result" in m for m in messages):
            raise SystemExit(f"preflight failed: HTTP {status} {got.get('content-type')} {body[:300]!r}")
        content_type, size = got.get("content-type", ""), len(body)
    print(
        f"handshake: {count} sessions, protocol {init.get('protocolVersion')}, stateful={bool(sessions[0])}, "
        f"median {statistics.median(handshakes) * 1000:.2f} ms; preflight {args.method}: {content_type}, {size} B",
        file=sys.stderr,
    )

    start: dict[str, float] = {}

    def mark() -> None:  # the engine calls it when the load starts
        start["cpu"] = process_cpu_s(args.server_pid) if args.server_pid else 0.0
        start["idle"], start["total"] = box_idle()
        start["t"] = time.perf_counter()

    result = run_wrk(args, sessions, mark) if args.engine == "wrk" else run_py(args, sessions, mark)
    wall = time.perf_counter() - start["t"]
    idle, total = box_idle()
    if args.server_pid:
        result["server_cpu_pct"] = 100 * (process_cpu_s(args.server_pid) - start["cpu"]) / wall
    result["gen_cpu_pct"] = 100 * result["gen_cpu_s"] / wall
    # The name is historical (every consumer reads it): busy % of all the machine's cores.
    result["box_busy_pct_of_2cores"] = 100 * (1 - (idle - start["idle"]) / max(1, total - start["total"]))
    for sid in sessions:
        if sid:
            try:
                client.req("DELETE", None, {"Mcp-Session-Id": sid, "MCP-Protocol-Version": args.protocol_version})
            except (OSError, http.client.HTTPException):
                client = Http(args.url)
    client.close()

    result.update(
        {
            "label": args.label,
            "url": args.url,
            "method": args.method,
            "concurrency": args.concurrency,
            "sessions": count,
            "duration": args.duration,
            "handshake_median_ms": statistics.median(handshakes) * 1000,
            "response_content_type": content_type,
        }
    )
    server = f", server CPU {result['server_cpu_pct']:.0f}%" if "server_cpu_pct" in result else ""
    print(
        f"{args.label or args.url} {args.method} c={args.concurrency} [{result['engine']}]: "
        f"{result['rps']:.0f} req/s, p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms, "
        f"errors {result['errors']} (ok {result['ok']}/{result['requests']}); "
        f"generator CPU {result['gen_cpu_pct']:.0f}%{server}, box busy {result['box_busy_pct_of_2cores']:.0f}%"
    )
    if result["errors"]:
        print(f"  error detail: {result['err_detail']} sample: {result['error_sample']!r}")
    print("RESULT " + json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
