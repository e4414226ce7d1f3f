"""Attacks through what the registry fetches and calls: http resources, webhooks, their secrets.

A real server process (allowed to reach loopback, where the upstreams of these tests live) reads
``http`` resources from an upstream that answers with a 400 MB body, a gzip bomb, a drip-fed
body, a redirect or a 500, and calls tools whose webhook floods it with progress lines. Each test
asserts the refusal (naming the limit where one applies), that ``/healthz`` kept answering while
the attack ran, and that the server's RSS stayed within a stated bound. The secrets test shows an
editor cannot point a tool's stored header and signing secret at a host of their own.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from registry.catalog.sealing import origin
from tests.factories import tool_body
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient, parse_sse_body
from tests.security.conftest import MiB, ResponsivenessProbe, ask_healthz
from tests.serve_process import ServerProcess

#: A tighter deadline than the default 15 s keeps the drip-feed test short.
RESOURCE_SECONDS = 3.0
RESOURCE_BYTES = 4 * MiB
PROGRESS_PER_SECOND = 20
#: How much the server's RSS may grow during one attack.
RSS_BOUND = 64 * MiB
MASK = "********"


# --------------------------------------------------------------------------- upstream


@dataclass
class Upstream:
    """A small HTTP/1.1 server in a thread: the far side of http resources and webhooks."""

    httpd: ThreadingHTTPServer
    #: Request headers seen per path, in arrival order.
    seen: dict[str, list[dict[str, str]]] = field(default_factory=dict)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def _zeros_gzip(total: int, piece: int = 1 * MiB) -> Iterator[bytes]:
    """A gzip stream of ``total`` zero bytes, compressed as it is sent (about 1000:1)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(piece)
    for _ in range(total // piece):
        out = compressor.compress(zeros)
        if out:
            yield out
    yield compressor.flush()


SMALL_BOMB = b"".join(_zeros_gzip(10 * MiB))  # ~10 kB on the wire, 10 MB decoded


def _handler(upstream: Upstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _head(self, status: int, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()

        def _stream(self, chunks: Iterator[bytes], headers: dict[str, str]) -> None:
            """Close-delimited (no length, no chunking): the client learns the size only by reading."""
            self._head(200, {**headers, "Connection": "close"})
            self.close_connection = True
            try:
                for chunk in chunks:
                    self.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _fixed(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self._head(status, {**headers, "Content-Length": str(len(body))})
            self.wfile.write(body)

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def do_GET(self) -> None:
            self._dispatch()

        def do_POST(self) -> None:
            self._dispatch()

        def _dispatch(self) -> None:
            path = self.path.split("?", 1)[0]
            upstream.seen.setdefault(path, []).append({k.lower(): v for k, v in self.headers.items()})
            self._body()
            if path == "/big":  # 400 MB, generated as it is sent
                block = b"a" * MiB
                self._stream((block for _ in range(400)), {"Content-Type": "text/plain"})
            elif path == "/bomb":  # 10 MB of zeros in ~10 kB, with its length declared
                self._fixed(200, SMALL_BOMB, {"Content-Type": "text/plain", "Content-Encoding": "gzip"})
            elif path == "/big-bomb":  # 4 GB of zeros in ~4 MB, compressed as it is sent
                self._stream(_zeros_gzip(4096 * MiB), {"Content-Type": "text/plain", "Content-Encoding": "gzip"})
            elif path == "/drip":  # one byte a second, for ever
                self._stream(self._drip(), {"Content-Type": "text/plain"})
            elif path == "/redirect":
                self._fixed(302, b"", {"Location": upstream.url("/ok")})
            elif path == "/status500":
                self._fixed(500, b"internal error at 10.1.2.3:5432", {"Content-Type": "text/plain"})
            elif path == "/ok":
                self._fixed(200, b"fine", {"Content-Type": "text/plain"})
            elif path == "/hook":
                self._fixed(200, json.dumps({"ok": True}).encode(), {"Content-Type": "application/json"})
            elif path == "/flood":  # NDJSON: thousands of progress and log lines, then the result
                self._stream(self._flood(), {"Content-Type": "application/x-ndjson"})
            else:
                self._fixed(404, b"", {})

        @staticmethod
        def _drip() -> Iterator[bytes]:
            for _ in range(600):
                yield b"x"
                time.sleep(1.0)

        @staticmethod
        def _flood() -> Iterator[bytes]:
            lines = []
            for n in range(1, 5001):
                lines.append(json.dumps({"progress": n, "total": 5000}))
                lines.append(json.dumps({"log": {"level": "info", "data": f"step {n}"}}))
            lines.append(json.dumps({"result": {"content": [{"type": "text", "text": "flooded"}]}}))
            text = ("\n".join(lines) + "\n").encode()
            for start in range(0, len(text), 4096):  # small writes spread over ~1 s
                yield text[start : start + 4096]
                time.sleep(0.005)

    return Handler


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[Upstream, Upstream]]:
    """Two upstreams on their own loopback ports: two origins."""
    made: list[Upstream] = []
    for _ in range(2):
        upstream = Upstream(httpd=ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler))
        upstream.httpd.RequestHandlerClass = _handler(upstream)
        upstream.httpd.daemon_threads = True
        threading.Thread(target=upstream.httpd.serve_forever, daemon=True).start()
        made.append(upstream)
    try:
        yield made[0], made[1]
    finally:
        for upstream in made:
            upstream.httpd.shutdown()
            upstream.httpd.server_close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir: Path = tmp_path_factory.mktemp("outbound-server")
    env = {
        "REGISTRY_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
        "REGISTRY_LIMIT_HTTP_RESOURCE_SECONDS": str(RESOURCE_SECONDS),
        "REGISTRY_LIMIT_HTTP_RESOURCE_BYTES": str(RESOURCE_BYTES),
        "REGISTRY_LIMIT_PROGRESS_PER_SECOND": str(PROGRESS_PER_SECOND),
    }
    with ServerProcess(data_dir, name="outbound", env=env) as process:
        yield process


# --------------------------------------------------------------------------- helpers


def _session(server: ServerProcess, timeout: float = 60.0) -> StreamableHttpClient:
    client = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=timeout, verify=TLS))
    client.initialize("2025-11-25")
    return client


def _http_resource(server: ServerProcess, name: str, url: str, **extra: Any) -> str:
    uri = f"upstream://{name}"
    body = {"name": name, "kind": "http", "uri": uri, "url": url, "cache_ttl_s": 0, **extra}
    with server.admin() as admin:
        created = admin.post("/api/v1/resources", json=body)
    assert created.status_code == 201, created.text
    return uri


@dataclass
class Attack:
    answer: dict[str, Any]
    seconds: float
    rss_growth: int


def _attack(server: ServerProcess, run: Callable[[], dict[str, Any]]) -> Attack:
    before = server.rss()
    with ResponsivenessProbe(ask_healthz, server) as probe:
        started = time.monotonic()
        answer = run()
        seconds = time.monotonic() - started
        probe.wait_for_more()  # a few probes after the answer too
    growth = server.rss() - before
    probe.assert_responsive()
    return Attack(answer, seconds, growth)


def _refused_read(server: ServerProcess, upstream: Upstream, path: str, what: str) -> tuple[Attack, str]:
    """Read an http resource served by ``upstream`` at ``path``: a JSON-RPC error naming no
    address, with the server's RSS within the bound; returns the attack and the error text."""
    uri = _http_resource(server, "res" + path.replace("/", "-"), upstream.url(path))
    client = _session(server)
    attack = _attack(server, lambda: client.request("resources/read", {"uri": uri}))
    assert "error" in attack.answer, f"expected a JSON-RPC error, got {str(attack.answer)[:300]}"
    message: str = attack.answer["error"]["message"]
    _assert_no_internal_address(message, upstream)
    _assert_rss(attack, what)
    return attack, message


def _assert_rss(attack: Attack, what: str) -> None:
    grown = attack.rss_growth / MiB
    assert attack.rss_growth < RSS_BOUND, f"{what}: RSS grew by {grown:.0f} MiB, bound {RSS_BOUND // MiB} MiB"


def _assert_no_internal_address(text: str, upstream: Upstream) -> None:
    """Neither the URL (nor its path or port) nor an address: the upstream is a literal IP here."""
    for leak in ("http://", f":{upstream.port}", "127.0.0.1", "10.1.2.3", "/status500", "/redirect", "/ok"):
        assert leak not in text, f"error text names an internal address ({leak}): {text}"


# --------------------------------------------------------------------------- http resources (item 6)


@pytest.mark.parametrize(
    ("path", "what"),
    [("/big", "a 400 MB body"), ("/bomb", "a 10 MB gzip bomb"), ("/big-bomb", "a 4 GB gzip bomb")],
)
def test_oversized_http_resource_is_refused_while_streaming(
    server: ServerProcess, upstreams: tuple[Upstream, Upstream], path: str, what: str
) -> None:
    attack, message = _refused_read(server, upstreams[0], path, what)
    assert "REGISTRY_LIMIT_HTTP_RESOURCE_BYTES" in message, message
    assert attack.seconds < RESOURCE_SECONDS, f"{what} took {attack.seconds:.1f} s to refuse: not refused early"


def test_drip_fed_http_resource_ends_at_the_total_deadline(
    server: ServerProcess, upstreams: tuple[Upstream, Upstream]
) -> None:
    attack, message = _refused_read(server, upstreams[0], "/drip", "a drip-fed body")
    assert "REGISTRY_LIMIT_HTTP_RESOURCE_SECONDS" in message, message
    assert RESOURCE_SECONDS - 0.5 <= attack.seconds < RESOURCE_SECONDS + 3, f"answered after {attack.seconds:.1f} s"


@pytest.mark.parametrize(("path", "status"), [("/redirect", "302"), ("/status500", "500")])
def test_redirect_and_non_2xx_are_errors_not_content(
    server: ServerProcess, upstreams: tuple[Upstream, Upstream], path: str, status: str
) -> None:
    upstream, _ = upstreams
    _, message = _refused_read(server, upstream, path, f"HTTP {status}")
    assert f"HTTP {status}" in message, message
    if path == "/redirect":
        assert "redirect" in message
        assert upstream.seen.get("/ok", []) == [], "the redirect must not be followed"


def test_http_resource_sends_its_write_only_headers(
    server: ServerProcess, upstreams: tuple[Upstream, Upstream]
) -> None:
    upstream, _ = upstreams
    uri = _http_resource(server, "with-headers", upstream.url("/ok"), headers={"Authorization": "Bearer res-token"})
    with server.admin() as admin:
        shown = admin.get("/api/v1/resources/with-headers").json()["spec"]
    assert shown["headers"] == {"Authorization": MASK}
    client = _session(server)
    answer = client.request("resources/read", {"uri": uri})
    assert answer["result"]["contents"][0]["text"] == "fine", answer
    assert upstream.seen["/ok"][-1]["authorization"] == "Bearer res-token"


# --------------------------------------------------------------------------- secrets follow the origin (item 3)


def _exfil_tool(url: str, headers: dict[str, str], secret: str | None) -> dict[str, Any]:
    hook = {"headers": headers, "secret": secret}
    return tool_body("exfil", url, properties=None, description="calls upstream A", webhook=hook)


def test_masked_webhook_secrets_cannot_follow_a_new_origin(
    server: ServerProcess, upstreams: tuple[Upstream, Upstream]
) -> None:
    a, b = upstreams
    with server.admin() as admin:
        created = admin.post(
            "/api/v1/tools", json=_exfil_tool(a.url("/hook"), {"Authorization": "Bearer A-token"}, "sig-A")
        )
        assert created.status_code == 201, created.text
        # The attack: point the tool at B, keep the masks, publish to a fresh label.
        moved = admin.put(
            "/api/v1/tools/exfil",
            json={**_exfil_tool(b.url("/hook"), {"Authorization": MASK}, MASK), "labels": ["exfil"]},
        )
        assert moved.status_code == 422, moved.text
        assert moved.headers["content-type"].startswith("application/problem+json")
        detail = moved.json()["detail"]
        assert "Authorization" in detail and "secret" in detail and "origin" in detail, detail
        # Nothing was stored.
        assert admin.get("/api/v1/tools/exfil").json()["latest_version"] == 1
        # The same with a different port or scheme on the same host: a different origin too.
        other_port = _exfil_tool(a.url("/hook").replace(str(a.port), str(b.port)), {"Authorization": MASK}, None)
        assert admin.put("/api/v1/tools/exfil", json=other_port).status_code == 422
        # The same origin (another path or query) keeps the masks.
        same_origin = a.url("/hook?v=2")
        kept = admin.put("/api/v1/tools/exfil", json=_exfil_tool(same_origin, {"Authorization": MASK}, MASK))
        assert kept.status_code == 200, kept.text
    client = _session(server)
    result = client.request("tools/call", {"name": "exfil", "arguments": {}})["result"]
    assert result["isError"] is False, result
    assert a.seen["/hook"][-1]["authorization"] == "Bearer A-token"
    assert "x-registry-signature" in a.seen["/hook"][-1]
    assert "/hook" not in b.seen, "nothing may reach upstream B"


def test_masked_resource_headers_cannot_follow_a_new_origin(
    server: ServerProcess, upstreams: tuple[Upstream, Upstream]
) -> None:
    a, b = upstreams
    body = {"name": "res-exfil", "kind": "http", "uri": "upstream://res-exfil", "cache_ttl_s": 0}
    with server.admin() as admin:
        created = admin.post("/api/v1/resources", json={**body, "url": a.url("/ok"), "headers": {"X-Key": "res-A"}})
        assert created.status_code == 201, created.text
        moved = admin.put("/api/v1/resources/res-exfil", json={**body, "url": b.url("/ok"), "headers": {"X-Key": MASK}})
        assert moved.status_code == 422, moved.text
        assert "X-Key" in moved.json()["detail"]
        kept = admin.put(
            "/api/v1/resources/res-exfil", json={**body, "url": a.url("/ok?x=1"), "headers": {"X-Key": MASK}}
        )
        assert kept.status_code == 200, kept.text
    assert "/ok" not in b.seen or all("x-key" not in h for h in b.seen["/ok"])


def test_origin_rule_uses_normalised_origins(server: ServerProcess) -> None:
    """Same origin: another path or query, the default port spelled out, the host's case. Another
    origin: scheme, host or port changed, including a host hidden behind user info."""
    with server.admin() as admin:
        hook = {"url": "http://127.0.0.1/hook", "headers": {"X-Key": "v"}}
        assert admin.post("/api/v1/tools", json={"name": "norm", "webhook": hook}).status_code == 201
        for url in ("http://127.0.0.1:80/other?x=1", "http://127.0.0.1"):
            same = {"name": "norm", "webhook": {"url": url, "headers": {"X-Key": MASK}}}
            answer = admin.put("/api/v1/tools/norm", json=same)
            assert answer.status_code == 200, (url, answer.text)
        for url in (
            "https://127.0.0.1/hook",
            "http://127.0.0.1:8080/hook",
            "http://127.0.0.2/hook",
            "http://127.0.0.1:80@127.0.0.2/hook",
        ):
            other = {"name": "norm", "webhook": {"url": url, "headers": {"X-Key": MASK}}}
            answer = admin.put("/api/v1/tools/norm", json=other)
            assert answer.status_code == 422, (url, answer.text)
            assert "origin" in answer.json()["detail"], answer.text
    assert origin("http://Example.COM:80/a") == origin("http://example.com/b")
    assert origin("https://example.com") != origin("http://example.com:443")


# --------------------------------------------------------------------------- progress flood (also:)


def test_webhook_progress_is_relayed_at_a_bounded_rate(
    server: ServerProcess, upstreams: tuple[Upstream, Upstream]
) -> None:
    a, _ = upstreams
    with server.admin() as admin:
        tool = {"name": "flood", "webhook": {"url": a.url("/flood"), "timeout_s": 60}}
        assert admin.post("/api/v1/tools", json=tool).status_code == 201
    client = _session(server)
    assert client.request("logging/setLevel", {"level": "debug"})["result"] == {}
    message = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "tools/call",
        "params": {"name": "flood", "arguments": {}, "_meta": {"progressToken": "p"}},
    }
    attack = _attack(server, lambda: {"response": client.post(message)})
    messages = [e.json() for e in parse_sse_body(attack.answer["response"].text) if e.data]
    progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
    logs = [m["params"] for m in messages if m.get("method") == "notifications/message"]
    assert messages[-1]["result"]["content"] == [{"type": "text", "text": "flooded"}]
    # 10,000 lines arrived; at most the rate (over the call's duration, plus one second's burst)
    # went out, plus the final progress value and one note about dropped log messages.
    allowed = PROGRESS_PER_SECOND * (attack.seconds + 1) + 2
    assert len(progress) + len(logs) <= allowed, f"{len(progress)} progress + {len(logs)} logs, bound {allowed:.0f}"
    assert progress and progress[-1]["progress"] == 5000, "the final progress value must always be sent"
    values = [p["progress"] for p in progress]
    assert values == sorted(values), "coalescing keeps progress in order"
    notes = [entry for entry in logs if "dropped" in str(entry["data"])]
    assert notes and "REGISTRY_LIMIT_PROGRESS_PER_SECOND" in str(notes[-1]["data"])
    _assert_rss(attack, "a progress flood")


# --------------------------------------------------------------------------- SSRF blocklist (also:)


@pytest.mark.parametrize("kind", ["tools", "resources"])
def test_site_local_ipv6_destinations_are_refused(server: ServerProcess, kind: str) -> None:
    url = "http://[fec0::1]:8080/internal"
    body: dict[str, Any] = (
        {"name": "site-local-tool", "webhook": {"url": url}}
        if kind == "tools"
        else {"name": "site-local-res", "kind": "http", "uri": "upstream://site-local", "url": url}
    )
    before = server.rss()
    with ResponsivenessProbe(ask_healthz, server) as probe, server.admin() as admin:
        refused = admin.post(f"/api/v1/{kind}", json=body)
        probe.wait_for_more()
    probe.assert_responsive(min_probes=1)
    assert refused.status_code == 422, refused.text
    assert "site-local (fec0::/10)" in refused.json()["detail"], refused.text
    _assert_rss(Attack({}, 0.0, server.rss() - before), "a site-local URL")
