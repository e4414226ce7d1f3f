"""Webhooks that attack the registry through its outbound client, and the caps on outbound calls.

1. Trailers: a chunked answer followed by trailer lines for ever, or by one trailer that never
   ends. Against a real ``mcp-registry serve`` process: "a trailer flood and an endless trailer end
   the call with a clear tool error, RSS grows by less than 50 MB and /healthz answers within
   100 ms meanwhile".
2. Poisoned keep-alive connections: an answer followed by the start of a second one, or by a
   complete second one sent a moment later while the connection sits idle in the pool
   (aio-libs/aiohttp#13656). Neither may reach the next caller on that origin.
3. Fairness: "with 100 slow calls held to one origin by one token, another token's call to another
   origin answers within 1 s"; the calls past a cap are refused at once, naming it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from registry.limits import Limits
from registry.webhooks import (
    HttpResourceCache,
    OutboundCalls,
    ResourceFetchError,
    WebhookTarget,
    call_webhook,
    caller_key,
    make_guarded_client,
)
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient
from tests.security.conftest import MiB, ResponsivenessProbe
from tests.serve_process import ServerProcess, issue_token
from tests.waiting import wait_until

from .conftest import LOOPBACK, RawServer, WebhookServer, http_answer

#: The acceptance bounds (the spec's figures).
RSS_GROWTH_BOUND = 50 * MiB
#: Slow calls one token holds in the fairness test: the per-caller cap of its server.
HELD_CALLS = 100
#: What an agent is told when a webhook's answer breaks HTTP (trailers past the bounds included).
BROKE_HTTP = "webhook call to '127.0.0.1' failed: the server broke the HTTP protocol"


def result_of(text: str) -> bytes:
    return json.dumps({"content": [{"type": "text", "text": text}]}).encode()


# --------------------------------------------------------------------------- a real server


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``mcp-registry serve`` allowed to call loopback. One token may hold as many calls as one
    origin may be sent (100), so that one token can hold an origin's whole share."""
    env = {
        "REGISTRY_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
        "REGISTRY_LIMIT_OUTBOUND_CALLS_PER_CALLER": str(HELD_CALLS),
    }
    with ServerProcess(tmp_path_factory.mktemp("hostile-webhooks"), name="hostile", env=env) as process:
        yield process


def create_tool(server: ServerProcess, name: str, url: str) -> None:
    with server.admin() as admin:
        made = admin.post("/api/v1/tools", json={"name": name, "webhook": {"url": url, "timeout_s": 60}})
    assert made.status_code == 201, made.text


@contextmanager
def session(
    server: ServerProcess, token: str | None = None, *, concurrency: int = 10
) -> Iterator[StreamableHttpClient]:
    """An initialized MCP session that may have ``concurrency`` requests in flight at once."""
    with httpx.Client(
        base_url=server.url,
        headers={"Authorization": f"Bearer {token}"} if token else {},
        timeout=120,
        limits=httpx.Limits(max_connections=concurrency), verify=TLS,
    ) as http:
        client = StreamableHttpClient(http)
        client.initialize("2025-11-25")
        yield client


def call_tool(client: StreamableHttpClient, name: str, request_id: int = 99) -> dict[str, Any]:
    answer = client.request("tools/call", {"name": name, "arguments": {}}, request_id=request_id)
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def text_of(result: dict[str, Any]) -> str:
    text: str = result["content"][0]["text"]
    return text


# --------------------------------------------------------------------------- 1. trailers


async def endless_trailers(
    server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int
) -> None:
    """A chunked ``{}`` whose trailer section never ends: ``/flood`` sends 1 kB trailer lines,
    ``/endless`` one trailer whose value goes on; both until the client hangs up (or 2 GB).
    (Trailers that arrive in a later read than the head, once it has been handed on, are
    tests/webhooks/test_webhook_framing.py's: there the test decides where reads end.)"""
    await server.read_request(reader, index)
    path = server.paths[index][-1]
    writer.write(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n2\r\n{}\r\n0\r\n"
    )
    if path.endswith("/flood"):
        block = (b"X-Trailer: " + b"t" * 1000 + b"\r\n") * 64
    else:
        writer.write(b"X-Trailer: ")
        block = b"t" * 65536
    for _ in range(2 * 1024 * MiB // len(block)):
        writer.write(block)
        await writer.drain()


def test_a_trailer_flood_and_an_endless_trailer_end_the_call_with_a_clear_tool_error(
    registry: ServerProcess,
) -> None:
    rss: list[int] = []

    def healthz_and_rss(http: httpx.Client) -> None:
        assert http.get("/healthz").status_code == 200
        rss.append(registry.rss())

    with RawServer(endless_trailers) as hostile, session(registry) as client:
        attacks = ["/flood", "/endless"]
        for path in attacks:
            create_tool(registry, "trailers" + path.replace("/", "-"), hostile.url(path))
        before = registry.rss()
        results: list[dict[str, Any]] = []
        with ResponsivenessProbe(healthz_and_rss, registry, interval=0.02) as probe:
            # Each attack ends at once: keep attacking until /healthz has been asked ten times.
            while len(probe.probes) < 10 and len(results) < 10_000:
                results += [call_tool(client, "trailers" + path.replace("/", "-")) for path in attacks]
        # Every hostile connection was hung up on by the registry, none left streaming.
        wait_until(lambda: not hostile._tasks, "the registry to hang up on the hostile webhook")
    assert [(r["isError"], text_of(r)) for r in results] == [(True, BROKE_HTTP)] * len(results)
    growth = max([*rss, registry.rss()]) - before
    assert growth < RSS_GROWTH_BOUND, f"RSS grew by {growth / MiB:.0f} MiB"
    probe.assert_responsive(min_probes=10)


# --------------------------------------------------------------------------- 2. poisoned connections

FIRST = http_answer(result_of("first"))
INJECTED = http_answer(result_of("injected"))
SECOND = http_answer(result_of("second"))
#: A status line and the start of a header: an answer that never completes.
PARTIAL = b"HTTP/1.1 200 OK\r\nContent-Le"


class Injector(RawServer):
    """On its first connection, answers the first request and then sends what follows (``tail``):
    in the same write, or (``delayed``) once the test opens the gate, when the registry has put
    the connection back in its pool. A request that comes over that connection again is answered
    with what would complete the tail as an answer, then the genuine answer; any other connection
    gets the genuine answer."""

    def __init__(self, tail: bytes, *, delayed: bool) -> None:
        super().__init__(Injector._serve_one)
        self.tail = tail
        self.delayed = delayed
        #: Set once the tail is written.
        self.tail_sent = threading.Event()

    @staticmethod
    async def _serve_one(
        srv: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int
    ) -> None:
        assert isinstance(srv, Injector)
        await srv.read_request(reader, index)
        if index > 0:
            writer.write(SECOND)
            await writer.drain()
            await reader.read()
            return
        if srv.delayed:
            writer.write(FIRST)
            await writer.drain()
            await srv.hold()
            writer.write(srv.tail)
        else:
            writer.write(FIRST + srv.tail)
        await writer.drain()
        srv.tail_sent.set()
        await srv.read_request(reader, index)  # the pooled connection, reused: the poisoned case
        writer.write((b"ngth: 8\r\n\r\ninjected" if srv.tail == PARTIAL else b"") + SECOND)
        await writer.drain()
        await reader.read()


@pytest.mark.parametrize("delayed", [False, True], ids=["same-write", "a-moment-later"])
@pytest.mark.parametrize("tail", [INJECTED, PARTIAL], ids=["complete-second-answer", "partial-second-answer"])
async def test_what_follows_an_answer_never_reaches_the_next_caller(tail: bytes, delayed: bool) -> None:
    with Injector(tail, delayed=delayed) as upstream:
        async with make_guarded_client(LOOPBACK, timeout=5.0) as client:
            target = WebhookTarget(url=upstream.url("/hook"))
            first = await call_webhook(target, {}, client=client)
            assert first == {"content": [{"type": "text", "text": "first"}], "isError": False}
            if delayed:
                upstream.open_gate()  # the connection is idle in the pool now
            # Once the tail is written the registry's event loop has it (loopback): it reads the
            # socket in the same pass that wakes this task.
            assert await asyncio.to_thread(upstream.tail_sent.wait, 10)
            second = await call_webhook(target, {}, client=client)
    assert "injected" not in json.dumps(second)
    if tail == INJECTED:
        # The poisoned connection is closed, not used: the next call gets its own answer.
        assert second == {"content": [{"type": "text", "text": "second"}], "isError": False}
        assert upstream.connections == 2
    else:
        # The partial answer died with the old parser; what the server sends next is garbage to
        # the new one: an error for that caller, never the partial answer's completion.
        assert second["isError"] is True and text_of(second) == BROKE_HTTP


# --------------------------------------------------------------------------- 3. caps and fairness


async def hold_then_answer(
    server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int
) -> None:
    """A slow webhook: every request waits at the gate, then gets a result."""
    while True:
        await server.read_request(reader, index)
        await server.hold()
        writer.write(http_answer(result_of("slow")))
        await writer.drain()


def test_one_tokens_slow_calls_to_one_origin_do_not_hold_up_another_tokens_call(
    registry: ServerProcess, webhook_server: WebhookServer
) -> None:
    extra = 10
    with registry.admin() as admin:
        token_a = issue_token(admin, "slow-caller", ["agent"])["token"]
        token_b = issue_token(admin, "other-caller", ["agent"])["token"]
    with (
        RawServer(hold_then_answer) as slow,
        ThreadPoolExecutor(HELD_CALLS + extra) as pool,
        session(registry, token_a, concurrency=HELD_CALLS + extra) as caller_a,
        session(registry, token_b) as caller_b,
    ):
        create_tool(registry, "slow", slow.url("/slow"))
        create_tool(registry, "quick", webhook_server.url("/call-tool-result"))  # another origin
        calls: list[Future[dict[str, Any]]] = []
        try:
            calls = [pool.submit(call_tool, caller_a, "slow", n) for n in range(1, HELD_CALLS + extra + 1)]
            wait_until(
                lambda: slow.held == HELD_CALLS and sum(call.done() for call in calls) == extra,
                lambda: (
                    f"{HELD_CALLS} calls held and {extra} refused; {slow.held} held, "
                    f"{sum(call.done() for call in calls)} answered"
                ),
                timeout=60,
            )
            refused = [call.result() for call in calls if call.done()]
            for result in refused:
                assert result["isError"] is True
                assert text_of(result) == (
                    f"webhook call to '127.0.0.1' was not made: {HELD_CALLS} outbound calls of this caller are "
                    "in flight, the most one caller may have at once (limit REGISTRY_LIMIT_OUTBOUND_CALLS_PER_CALLER)"
                )

            # Answered while token A's calls are all still held at the gate: not queued behind them.
            quick = call_tool(caller_b, "quick")
            assert quick["isError"] is False, quick
            assert slow.held == HELD_CALLS and sum(call.done() for call in calls) == extra, (
                "token A's held calls moved before another token's call to another origin was answered"
            )

            # The slow origin has its share in flight: token B is refused there, naming that cap.
            crowded = call_tool(caller_b, "slow")
            assert crowded["isError"] is True
            assert text_of(crowded).endswith(
                f"{HELD_CALLS} outbound calls to this origin are in flight, the most one origin is sent at "
                "once (limit REGISTRY_LIMIT_OUTBOUND_CALLS_PER_ORIGIN)"
            )
        finally:
            slow.open_gate()
            wait(calls, timeout=60)
        answered = [call.result() for call in calls]
        assert call_tool(caller_a, "slow")["isError"] is False  # every place was given back
    assert sum(not result["isError"] for result in answered) == HELD_CALLS


@dataclass(frozen=True)
class ResourceSpec:
    url: str
    headers: dict[str, str] | None = None
    mimeType: str | None = None
    cache_ttl_s: float | None = 0.0


async def test_each_cap_refuses_at_once_naming_itself_and_every_call_gives_its_place_back(free_port: int) -> None:
    calls = OutboundCalls()
    limits = Limits(outbound_calls=3, outbound_calls_per_origin=2, outbound_calls_per_caller=1)
    with RawServer(hold_then_answer) as x, RawServer(hold_then_answer) as y:
        async with make_guarded_client(LOOPBACK, timeout=30.0, limits=limits, calls=calls) as client:

            async def call(url: str, caller: str) -> dict[str, Any]:
                return await call_webhook(WebhookTarget(url=url), {}, client=client, caller=caller)

            held = [
                asyncio.create_task(call(x.url("/1"), "token:1")),
                asyncio.create_task(call(x.url("/2"), "token:2")),
            ]
            await asyncio.to_thread(wait_until, lambda: x.held == 2, "two calls held at origin x")
            per_caller = await call(y.url("/"), "token:1")
            per_origin = await call(x.url("/"), "user:u")
            held.append(asyncio.create_task(call(y.url("/3"), "session:s")))
            await asyncio.to_thread(wait_until, lambda: y.held == 1, "a call held at origin y")
            total = await call(y.url("/"), "anonymous")
            with pytest.raises(ResourceFetchError) as resource:
                await HttpResourceCache(lambda: client, limits).read(
                    "slow://resource", ResourceSpec(y.url("/resource")), caller="token:1"
                )
            assert (calls.in_flight(), x.connections, y.connections) == (3, 2, 1), "refused calls connect nowhere"

            held[2].cancel()  # a cancelled call gives its place back
            with pytest.raises(asyncio.CancelledError):
                await held[2]
            assert calls.in_flight() == 2 and calls.in_flight(caller="session:s") == 0
            x.open_gate()  # a successful one too
            assert [result["isError"] for result in await asyncio.gather(*held[:2])] == [False, False]
            failed = await call(f"http://127.0.0.1:{free_port}/", "token:1")  # and a failed one
            assert text_of(failed) == "could not connect to webhook host '127.0.0.1': connection refused"
            assert calls.in_flight() == 0
            y.open_gate()
    limit = "(limit REGISTRY_LIMIT_OUTBOUND_CALLS{})"
    assert text_of(per_caller) == (
        "webhook call to '127.0.0.1' was not made: 1 outbound calls of this caller are in flight, "
        "the most one caller may have at once " + limit.format("_PER_CALLER")
    )
    assert text_of(per_origin) == (
        "webhook call to '127.0.0.1' was not made: 2 outbound calls to this origin are in flight, "
        "the most one origin is sent at once " + limit.format("_PER_ORIGIN")
    )
    assert text_of(total) == (
        "webhook call to '127.0.0.1' was not made: 3 outbound calls are in flight in this process, "
        "the most it makes at once " + limit.format("")
    )
    assert str(resource.value) == (
        "could not fetch resource slow://resource: 1 outbound calls of this caller are in flight, "
        "the most one caller may have at once " + limit.format("_PER_CALLER")
    )


def test_whose_call_it_is() -> None:
    assert caller_key(7, "alice", "s1") == "token:7"
    assert caller_key(None, "alice", "s1") == "user:alice"
    assert caller_key(None, None, "s1") == "session:s1"
    assert caller_key(None, None, None, "10.0.0.7") == "address:10.0.0.7"  # an anonymous stateless request
    assert caller_key(None, None, None) == "anonymous"  # stdio: its one host


def test_a_requests_outbound_caller_is_whoever_it_comes_from() -> None:
    from registry.mcp.server import RequestContext
    from registry.mcp.sessions import ClientState

    anonymous = ClientState(label="production", principal="anonymous")
    assert RequestContext(client=anonymous, modern=True, peer="10.0.0.7").outbound_caller == "address:10.0.0.7"
    assert RequestContext(client=anonymous, session_id="s1", peer="10.0.0.7").outbound_caller == "session:s1"
    agent = ClientState(label="production", principal="agent", token_id=3)
    assert RequestContext(client=agent, modern=True, peer="10.0.0.7").outbound_caller == "token:3"
