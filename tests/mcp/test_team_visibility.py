"""Team visibility over MCP (issue 11): an agent of team A never sees team B's entries, over any
method or any notification, in every transport and both protocol eras.

A real ``mcp-registry serve`` per database (SQLite, PostgreSQL), populated through the admin API:
teams ``a`` and ``b``; a prompt, a static resource, a template resource and a tool in team a, in
team b and global; two templates matching the same URIs (team b's first in name order); a global
prompt that embeds team b's resource; more than a page of team b prompts. Agents: a token of
team a (viewer), one of team b, one of no team, the admin token, and anonymous.

- Every list (and its cursors), get, read (static and template), call, completion and subscribe
  shows exactly the caller's entries, and answers for another team's entry exactly as for a
  missing one: over Streamable HTTP (a session), HTTP+SSE (legacy) and 2026-07-28 (stateless,
  whose ``cacheScope`` never lets a shared cache hand a team's view to someone else).
- An edit of a team-b entry reaches team b's GET stream, legacy SSE stream and listen stream,
  and nothing of it reaches team a's; a move from b to global tells team a; a ``Last-Event-ID``
  replay after a b-only change shows team a nothing of it; across two replicas on PostgreSQL too.
- In-process: a snapshot kept current through team moves equals a fresh build, and its filtered
  pages are the plain filter of the whole list.
"""

from __future__ import annotations

import asyncio
import json
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from registry.catalog.values import WriteOptions
from registry.db.changelog import changes_after
from registry.mcp.notifier import ChangeEvent
from registry.mcp.server import McpServer
from registry.mcp.sessions import ClientState
from registry.mcp.snapshot import LISTS, CatalogSnapshot, SnapshotCache
from registry.runtime import Registry
from tests.conftest import _drop_postgres_schema, _fresh_postgres_schema, replica_pair, require_postgres
from tests.factories import tool_body
from tests.http import TLS
from tests.interop.mcp_wire import ACCEPT_BOTH, SseEvent, StreamableHttpClient, iter_sse, response_messages
from tests.serve_process import ServerProcess

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "team-test", "version": "1.0.0"},
}
NAME_FIELDS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
#: Entry suffix -> its team (``g``: global).
OWNERS: dict[str, str | None] = {"a": "a", "b": "b", "g": None}
#: What each agent sees.
VISIBLE = {
    "agent-a": {"g", "a"},
    "agent-b": {"g", "b"},
    "agent-none": {"g"},
    "anonymous": {"g"},
    "admin": {"g", "a", "b"},
}
#: Team b prompts beyond the others: more than one page (100) of prompts/list.
MANY = 105
#: Entries tests make as they go (left out when lists are compared).
TEMPORARY = "tmp-"
#: A tool call ``message`` the stateless client does not mirror in ``Mcp-Param-Message``: for a
#: tool the caller knows that is a header mismatch (-32020); for one it does not, "unknown tool".
UNMIRRORED = "unmirrored"


# ---------------------------------------------------------------------------- the server
@dataclass
class World:
    server: ServerProcess
    #: agent -> bearer token (None: anonymous).
    tokens: dict[str, str | None] = field(default_factory=dict)

    def headers(self, agent: str) -> dict[str, str]:
        token = self.tokens[agent]
        return {"Authorization": f"Bearer {token}"} if token else {}


def _created(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code in (200, 201), response.text
    body: dict[str, Any] = response.json()
    return body


_tool = partial(tool_body, properties={"message": {"type": "string", "x-mcp-header": "Message"}})


def populate(server: ServerProcess) -> World:
    world = World(server)
    with server.admin() as admin:
        for team in ("a", "b"):
            _created(admin.post("/api/v1/teams", json={"name": team, "title": f"Team {team}"}))
        for x, team in OWNERS.items():
            prompt = {
                "name": f"p-{x}",
                "description": f"prompt of {x}",
                "arguments": [{"name": "topic", "enum": [f"topic-{x}"]}],
                "template": f"{x}: {{{{ topic }}}}",
                "team": team,
            }
            _created(admin.post("/api/v1/prompts", json=prompt))
            static = {"name": f"r-{x}", "kind": "static", "uri": f"doc://{x}/static", "text": f"static {x}"}
            _created(admin.post("/api/v1/resources", json={**static, "team": team}))
            template = {
                "name": f"t-{x}",
                "kind": "template",
                "uriTemplate": f"tpl://{x}/{{id}}",
                "text": f"template {x} {{{{ id }}}}",
            }
            _created(admin.post("/api/v1/resources", json={**template, "team": team}))
            _created(admin.post("/api/v1/tools", json=_tool(f"tool-{x}", description=f"tool of {x}", team=team)))
        # Two templates matching the same URIs: team b's comes first in name order.
        wild_b = {"name": "wild-b", "kind": "template", "uriTemplate": "wild://{id}", "text": "B {{ id }}", "team": "b"}
        _created(admin.post("/api/v1/resources", json=wild_b))
        wild_g = {"name": "wild-g", "kind": "template", "uriTemplate": "wild://{key}", "text": "G {{ key }}"}
        _created(admin.post("/api/v1/resources", json=wild_g))
        embeds = {
            "name": "embeds-b",
            "messages": [{"role": "user", "content": {"type": "resource", "uri": "doc://b/static"}}],
        }
        _created(admin.post("/api/v1/prompts", json=embeds))
        for index in range(MANY):
            _created(admin.post("/api/v1/prompts", json={"name": f"q-b-{index:03d}", "template": "q", "team": "b"}))
        for agent, teams in (("agent-a", {"a": "viewer"}), ("agent-b", {"b": "viewer"}), ("agent-none", {})):
            token = _created(admin.post("/api/v1/tokens", json={"name": agent, "scopes": ["agent"], "teams": teams}))
            world.tokens[agent] = token["token"]
    world.tokens["admin"] = server.admin_token
    world.tokens["anonymous"] = None
    return world


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, postgres_server_url: str | None
) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("teams")
    schema = None
    if request.param == "sqlite":
        url = f"sqlite:///{folder / 'registry.db'}"
    else:
        server_url = require_postgres(postgres_server_url)
        url, schema = _fresh_postgres_schema(server_url)
    server = ServerProcess(folder / "data", database_url=url, env={"REGISTRY_ANONYMOUS_AGENTS": "true"})
    try:
        server.start()
        yield populate(server)
    finally:
        server.stop()
        if schema is not None:
            assert postgres_server_url is not None
            _drop_postgres_schema(postgres_server_url, schema)


# ---------------------------------------------------------------------------- clients
class EventReader:
    """An SSE response (a GET stream, ``/sse``, a listen POST) held open in a thread; events queued."""

    def __init__(self, base_url: str, method: str, path: str, headers: dict[str, str], body: Any = None) -> None:
        self.events: queue.Queue[SseEvent] = queue.Queue()
        self.status: int | None = None
        self._client = httpx.Client(base_url=base_url, timeout=httpx.Timeout(10, read=120), verify=TLS)
        content = json.dumps(body) if body is not None else None
        self._thread = threading.Thread(target=self._run, args=(method, path, headers, content), daemon=True)
        self._thread.start()

    def _run(self, method: str, path: str, headers: dict[str, str], content: str | None) -> None:
        try:
            with self._client.stream(method, path, headers=headers, content=content) as response:
                self.status = response.status_code
                for event in iter_sse(response.iter_lines()):
                    self.events.put(event)
        except (httpx.HTTPError, RuntimeError):
            pass

    def next(self, timeout: float = 15.0) -> SseEvent:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no SSE event within {timeout}s (status {self.status})") from None

    def close(self) -> None:
        self._client.close()
        self._thread.join(timeout=0.2)


def _notification(event: SseEvent) -> dict[str, Any] | None:
    """A notification's method and params (``_meta`` left out), None for anything else."""
    if not event.data:
        return None
    message = event.json()
    if "method" not in message or "id" in message:
        return None
    params = {k: v for k, v in message.get("params", {}).items() if k != "_meta"}
    return {"method": message["method"], **({"params": params} if params else {})}


class Notes:
    """Notifications a stream has delivered (whatever else comes on it is put aside)."""

    def __init__(self, reader: EventReader) -> None:
        self.reader = reader
        self.seen: list[tuple[str | None, dict[str, Any]]] = []
        self.answers: dict[Any, dict[str, Any]] = {}

    def _take(self, event: SseEvent) -> None:
        if event.data:
            message = event.json()
            if "id" in message and "method" not in message:
                self.answers[message["id"]] = message
                return
        note = _notification(event)
        if note is not None:
            self.seen.append((event.id, note))

    def wait_for(self, wanted: dict[str, Any], timeout: float = 15.0) -> str | None:
        """Until ``wanted`` arrives (returns its event id); fails on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            for index, (event_id, note) in enumerate(self.seen):
                if note == wanted:
                    del self.seen[index]
                    return event_id
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{wanted} did not arrive; got {self.seen}")
            try:
                self._take(self.reader.events.get(timeout=left))
            except queue.Empty:
                continue

    def answer(self, request_id: Any, timeout: float = 15.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while request_id not in self.answers:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no answer to {request_id}")
            try:
                self._take(self.reader.events.get(timeout=left))
            except queue.Empty:
                continue
        return self.answers.pop(request_id)

    def drain(self, wait: float) -> list[dict[str, Any]]:
        """Everything that arrives within ``wait`` seconds, with what arrived before."""
        deadline = time.monotonic() + wait
        while (left := deadline - time.monotonic()) > 0:
            try:
                self._take(self.reader.events.get(timeout=left))
            except queue.Empty:
                break
        found = [note for _id, note in self.seen]
        self.seen.clear()
        return found


Rpc = Callable[[str, dict[str, Any]], dict[str, Any]]


class SessionAgent:
    """A Streamable HTTP session (2025-11-25) and, when opened, its GET stream."""

    def __init__(self, world: World, agent: str) -> None:
        self.world = world
        self.agent = agent
        http = httpx.Client(base_url=world.server.url, headers=world.headers(agent), timeout=30, verify=TLS)
        self.client = StreamableHttpClient(http)
        self.client.initialize("2025-11-25")
        self.stream: Notes | None = None
        self._ids = 100

    def rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._ids += 1
        return self.client.request(method, params, request_id=self._ids)

    def open_stream(self, last_event_id: str | None = None) -> str:
        """Open the GET stream; returns its priming event id (the change-log position)."""
        assert self.client.session_id is not None
        headers = {
            "Accept": "text/event-stream",
            "Mcp-Session-Id": self.client.session_id,
            "MCP-Protocol-Version": "2025-11-25",
            **self.world.headers(self.agent),
        }
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        reader = EventReader(self.world.server.url, "GET", "/mcp", headers)
        priming = reader.next()
        assert reader.status == 200 and priming.data == "" and priming.id is not None, (reader.status, priming)
        self.stream = Notes(reader)
        return priming.id

    def close(self) -> None:
        if self.stream is not None:
            self.stream.reader.close()
        self.client.http.close()


class LegacyAgent:
    """An HTTP+SSE session (2024-11-05): requests POSTed, answers and notifications on its stream."""

    def __init__(self, world: World, agent: str) -> None:
        self.headers = world.headers(agent)
        reader = EventReader(world.server.url, "GET", "/sse", {"Accept": "text/event-stream", **self.headers})
        first = reader.next()
        assert reader.status == 200 and first.event == "endpoint", (reader.status, first)
        self.endpoint = first.data
        self.stream = Notes(reader)
        self.http = httpx.Client(base_url=world.server.url, headers=self.headers, timeout=30, verify=TLS)
        self._ids = 0
        init = self.rpc(
            "initialize",
            {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "legacy", "version": "1"}},
        )
        assert "result" in init, init
        self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _post(self, message: dict[str, Any]) -> None:
        posted = self.http.post(
            self.endpoint, content=json.dumps(message), headers={"Content-Type": "application/json"}
        )
        assert posted.status_code == 202, posted.text

    def rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._ids += 1
        self._post({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params})
        return self.stream.answer(self._ids)

    def close(self) -> None:
        self.stream.reader.close()
        self.http.close()


def modern_post(
    world: World, agent: str, method: str, params: dict[str, Any], request_id: Any = 1, **extra: str
) -> httpx.Response:
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": META}}
    headers = {
        "Accept": ACCEPT_BOTH,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
        **world.headers(agent),
        **extra,
    }
    if method in NAME_FIELDS:
        headers["Mcp-Name"] = params[NAME_FIELDS[method]]
    with httpx.Client(base_url=world.server.url, timeout=30, verify=TLS) as http:
        return http.post("/mcp", content=json.dumps(message), headers=headers)


def modern_rpc(world: World, agent: str) -> Rpc:
    def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
        extra = {}
        arguments = params.get("arguments")
        mirrored = isinstance(arguments, dict) and arguments.get("message", UNMIRRORED) != UNMIRRORED
        if method == "tools/call" and mirrored:
            extra["Mcp-Param-Message"] = arguments["message"]  # the x-mcp-header mirror
        answer = response_messages(modern_post(world, agent, method, params, **extra))[-1]
        assert isinstance(answer, dict)
        return answer

    return rpc


def open_listen(world: World, agent: str, notifications: dict[str, Any]) -> Notes:
    message = {
        "jsonrpc": "2.0",
        "id": f"listen-{agent}",
        "method": "subscriptions/listen",
        "params": {"notifications": notifications, "_meta": META},
    }
    headers = {
        "Accept": ACCEPT_BOTH,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "subscriptions/listen",
        **world.headers(agent),
    }
    reader = EventReader(world.server.url, "POST", "/mcp", headers, message)
    ack = reader.next()
    assert reader.status == 200 and ack.json()["method"] == "notifications/subscriptions/acknowledged", ack
    return Notes(reader)


# ---------------------------------------------------------------------------- what an agent is shown
def _all_pages(rpc: Rpc, method: str, key: str, field_name: str) -> tuple[list[str], int]:
    """Every item of a list, following cursors: (the items' ``field_name``s, pages)."""
    found: list[str] = []
    cursor = None
    pages = 0
    while True:
        answer = rpc(method, {"cursor": cursor} if cursor else {})
        assert "result" in answer, answer
        pages += 1
        found += [item[field_name] for item in answer["result"][key]]
        cursor = answer["result"].get("nextCursor")
        if cursor is None:
            return found, pages
        assert pages < 10


def expected_lists(visible: set[str]) -> dict[str, set[str]]:
    prompts = {f"p-{x}" for x in visible} | {"embeds-b"}
    if "b" in visible:
        prompts |= {f"q-b-{index:03d}" for index in range(MANY)}
    templates = {f"tpl://{x}/{{id}}" for x in visible} | {"wild://{key}"}
    if "b" in visible:
        templates.add("wild://{id}")
    return {
        "prompts": prompts,
        "resources": {f"doc://{x}/static" for x in visible},
        "templates": templates,
        "tools": {f"tool-{x}" for x in visible},
    }


def _like_missing(hidden: dict[str, Any], missing: dict[str, Any], hidden_name: str, missing_name: str) -> None:
    """An answer about another team's entry is the answer about a missing one, name for name."""
    assert "error" in hidden, f"{hidden_name} was served: {hidden}"
    assert "error" in missing, missing
    assert json.loads(json.dumps(hidden["error"]).replace(hidden_name, missing_name)) == missing["error"]


def _result(answer: dict[str, Any]) -> dict[str, Any]:
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def check_what_is_shown(rpc: Rpc, agent: str, *, subscribe: bool) -> None:
    visible = VISIBLE[agent]
    expected = expected_lists(visible)
    prompts, pages = _all_pages(rpc, "prompts/list", "prompts", "name")
    assert len(prompts) == len(set(prompts)), "a cursor repeated an entry"
    assert {p for p in prompts if not p.startswith(TEMPORARY)} == expected["prompts"]
    assert prompts == sorted(prompts)
    assert pages == (2 if "b" in visible else 1)  # the team's 105 prompts page for b only
    resources, _ = _all_pages(rpc, "resources/list", "resources", "uri")
    assert set(resources) == expected["resources"]
    templates, _ = _all_pages(rpc, "resources/templates/list", "resourceTemplates", "uriTemplate")
    assert set(templates) == expected["templates"]
    tools, _ = _all_pages(rpc, "tools/list", "tools", "name")
    assert {t for t in tools if not t.startswith(TEMPORARY)} == expected["tools"]

    for x in OWNERS:
        seen = x in visible
        # prompts/get
        got = rpc("prompts/get", {"name": f"p-{x}", "arguments": {"topic": f"topic-{x}"}})
        if seen:
            assert _result(got)["messages"][0]["content"]["text"] == f"{x}: topic-{x}", got
        else:
            _like_missing(
                got, rpc("prompts/get", {"name": "p-nope", "arguments": {"topic": f"topic-{x}"}}), f"p-{x}", "p-nope"
            )
        # resources/read: static, then template
        for uri, text, missing in (
            (f"doc://{x}/static", f"static {x}", "doc://nope/static"),
            (f"tpl://{x}/7", f"template {x} 7", "tpl://nope/7"),
        ):
            got = rpc("resources/read", {"uri": uri})
            if seen:
                assert _result(got)["contents"][0]["text"] == text, got
            else:
                _like_missing(got, rpc("resources/read", {"uri": missing}), uri, missing)
        # tools/call (the stateless era's Mcp-Param-* check must not give another team's tool away)
        if seen:
            got = rpc("tools/call", {"name": f"tool-{x}", "arguments": {"message": "hi"}})
            assert _result(got)["content"][0]["text"] == "Echo: hi", got
        else:
            arguments = {"message": UNMIRRORED}
            hidden = rpc("tools/call", {"name": f"tool-{x}", "arguments": arguments})
            missing = rpc("tools/call", {"name": "tool-nope", "arguments": arguments})
            _like_missing(hidden, missing, f"tool-{x}", "tool-nope")
        if seen and not subscribe:  # stateless: the header check is on for the tools the caller knows
            got = rpc("tools/call", {"name": f"tool-{x}", "arguments": {"message": UNMIRRORED}})
            assert got["error"]["code"] == -32020, got
        # completion/complete: a prompt's argument, a template's variable
        prompt_ref = {"ref": {"type": "ref/prompt", "name": f"p-{x}"}, "argument": {"name": "topic", "value": ""}}
        got = rpc("completion/complete", prompt_ref)
        if seen:
            assert _result(got)["completion"]["values"] == [f"topic-{x}"], got
        else:
            missing_ref = {"ref": {"type": "ref/prompt", "name": "p-nope"}, "argument": {"name": "topic", "value": ""}}
            _like_missing(got, rpc("completion/complete", missing_ref), f"p-{x}", "p-nope")
        template_ref = {"ref": {"type": "ref/resource", "uri": f"tpl://{x}/{{id}}"}, "argument": {"name": "id"}}
        got = rpc("completion/complete", template_ref)
        if seen:
            assert "result" in got, got
        else:
            missing_ref = {"ref": {"type": "ref/resource", "uri": "tpl://nope/{id}"}, "argument": {"name": "id"}}
            _like_missing(got, rpc("completion/complete", missing_ref), f"tpl://{x}/{{id}}", "tpl://nope/{id}")
        if subscribe:  # session eras: subscribing to another team's URI is answered as for any URI
            hidden = rpc("resources/subscribe", {"uri": f"doc://{x}/static"})
            assert _result(hidden) == _result(rpc("resources/subscribe", {"uri": "doc://nope/static"})) == {}

    # The first template in name order that the caller sees serves a URI both match.
    got = rpc("resources/read", {"uri": "wild://7"})
    assert _result(got)["contents"][0]["text"] == ("B 7" if "b" in visible else "G 7"), got
    # A global prompt embedding team b's resource: embedded for b, "not available" for the others.
    got = rpc("prompts/get", {"name": "embeds-b"})
    if "b" in visible:
        assert _result(got)["messages"][0]["content"]["resource"]["text"] == "static b", got
    else:
        assert "not available" in got.get("error", {}).get("message", ""), got


# ---------------------------------------------------------------------------- requests
@pytest.mark.parametrize("agent", sorted(VISIBLE))
def test_a_session_is_shown_its_teams_only(world: World, agent: str) -> None:
    session = SessionAgent(world, agent)
    try:
        check_what_is_shown(session.rpc, agent, subscribe=True)
    finally:
        session.close()


@pytest.mark.parametrize("agent", ["agent-a", "agent-b", "admin"])
def test_a_legacy_sse_session_is_shown_its_teams_only(world: World, agent: str) -> None:
    legacy = LegacyAgent(world, agent)
    try:
        check_what_is_shown(legacy.rpc, agent, subscribe=True)
    finally:
        legacy.close()


@pytest.mark.parametrize("agent", sorted(VISIBLE))
def test_a_stateless_caller_is_shown_its_teams_only(world: World, agent: str) -> None:
    check_what_is_shown(modern_rpc(world, agent), agent, subscribe=False)


@pytest.mark.parametrize("agent", sorted(VISIBLE))
def test_a_team_view_is_never_marked_shareable(world: World, agent: str) -> None:
    """``cacheScope: public`` lets any cache hand a result to anyone: only the anonymous view, which
    shows global entries only, is public; every token's view is its own."""
    response = modern_post(world, agent, "prompts/list", {})
    result = response.json()["result"]
    assert result["cacheScope"] == ("public" if agent == "anonymous" else "private"), result
    read = modern_post(world, agent, "resources/read", {"uri": "doc://g/static"}).json()["result"]
    assert read["cacheScope"] == result["cacheScope"]


def test_only_views_that_show_no_team_entries_are_public(registry: Registry) -> None:
    """Callers without a token are private too once they have a user (single sign-on) or teams:
    only a view every anonymous caller is shown may be shared. stdio (no identity, sees every
    team) stays public while the label serves no team entries, as before teams."""
    server = McpServer(registry.catalog)

    def scope(label: str = "production", **fields: Any) -> str:
        client = ClientState(label=label, principal="someone", **fields)
        return str(server.stamp("tools/list", {"tools": []}, client)["cacheScope"])

    async def scenario() -> None:
        await server.snapshots.get("production")
        assert scope() == "public"
        assert scope(visible_teams=None) == "public"
        assert scope(user="sub-1") == scope(token_id=3) == scope("staging") == "private"
        registry.teams.create("a", actor="test")
        registry.catalog.create("prompt", {"name": "p", "template": "x"}, WriteOptions(actor="test"), team="a")
        await server.snapshots.apply(_events_after(registry, 0))
        assert scope(visible_teams=None) == scope(visible_teams=frozenset({"a"})) == "private"
        assert scope(visible_teams=frozenset({"b"})) == "private"  # conservative: any team view, once teams exist
        assert scope() == "public"
        await server.aclose()

    asyncio.run(scenario())


# ---------------------------------------------------------------------------- notifications
def _edit_description(world: World, collection: str, name: str, text: str) -> None:
    with world.server.admin() as admin:
        spec = admin.get(f"/api/v1/{collection}/{name}").json()["spec"]
        spec["description"] = text
        saved = admin.put(f"/api/v1/{collection}/{name}", json=spec)
        assert saved.status_code == 200, saved.text


def _edit_text(world: World, name: str, text: str) -> None:
    with world.server.admin() as admin:
        spec = admin.get(f"/api/v1/resources/{name}").json()["spec"]
        spec["text"] = text
        saved = admin.put(f"/api/v1/resources/{name}", json=spec)
        assert saved.status_code == 200, saved.text


TOOLS_CHANGED = {"method": "notifications/tools/list_changed"}
PROMPTS_CHANGED = {"method": "notifications/prompts/list_changed"}


def _updated(uri: str) -> dict[str, Any]:
    return {"method": "notifications/resources/updated", "params": {"uri": uri}}


LISTEN_ALL = {
    "toolsListChanged": True,
    "promptsListChanged": True,
    "resourcesListChanged": True,
    "resourceSubscriptions": ["doc://a/static", "doc://b/static", "doc://g/static"],
}


def test_a_team_b_edit_reaches_team_b_only(world: World) -> None:
    streams: dict[str, dict[str, Notes]] = {}
    closers: list[Callable[[], None]] = []
    try:
        for agent in ("agent-a", "agent-b", "admin"):
            session = SessionAgent(world, agent)
            closers.append(session.close)
            legacy = LegacyAgent(world, agent)
            closers.append(legacy.close)
            for uri in LISTEN_ALL["resourceSubscriptions"]:
                assert session.rpc("resources/subscribe", {"uri": uri})["result"] == {}
                assert "result" in legacy.rpc("resources/subscribe", {"uri": uri})
            session.open_stream()
            assert session.stream is not None
            listen = open_listen(world, agent, LISTEN_ALL)
            closers.append(listen.reader.close)
            streams[agent] = {"get": session.stream, "legacy": legacy.stream, "listen": listen}

        _edit_description(world, "tools", "tool-b", "tool of b, edited")
        _edit_text(world, "r-b", "static b, edited")
        for agent in ("agent-b", "admin"):
            for notes in streams[agent].values():
                notes.wait_for(TOOLS_CHANGED)
                notes.wait_for(_updated("doc://b/static"))
        for kind, notes in streams["agent-a"].items():
            assert notes.drain(1.0) == [], f"team a's {kind} stream heard of team b's changes"

        # Team a's streams are live: a global edit reaches them, and nothing else came before it.
        _edit_description(world, "tools", "tool-g", "tool of g, edited")
        _edit_text(world, "r-g", "static g, edited")
        for agent, kinds in streams.items():
            for kind, notes in kinds.items():
                notes.wait_for(TOOLS_CHANGED)
                notes.wait_for(_updated("doc://g/static"))
                assert notes.drain(0.3) == [], f"{agent} {kind}"
    finally:
        for close in closers:
            close()


def test_a_move_from_team_b_to_global_reaches_team_a(world: World) -> None:
    with world.server.admin() as admin:
        _created(admin.post("/api/v1/prompts", json={"name": "tmp-moved", "template": "moved", "team": "b"}))
    a_session, b_session = SessionAgent(world, "agent-a"), SessionAgent(world, "agent-b")
    a_legacy = LegacyAgent(world, "agent-a")
    a_session.open_stream()
    b_session.open_stream()
    a_listen = open_listen(world, "agent-a", {"promptsListChanged": True})
    try:
        assert a_session.stream is not None and b_session.stream is not None
        got = a_session.rpc("prompts/get", {"name": "tmp-moved"})
        assert got["error"]["message"] == "unknown prompt: tmp-moved"
        with world.server.admin() as admin:
            moved = admin.put("/api/v1/prompts/tmp-moved/team", json={"team": None, "reason": "everyone needs it"})
            assert moved.status_code == 200, moved.text
        for notes in (a_session.stream, a_legacy.stream, a_listen, b_session.stream):
            notes.wait_for(PROMPTS_CHANGED)
        shown = a_session.rpc("prompts/get", {"name": "tmp-moved"})
        assert shown["result"]["messages"][0]["content"]["text"] == "moved", shown
        names, _ = _all_pages(modern_rpc(world, "agent-a"), "prompts/list", "prompts", "name")
        assert "tmp-moved" in names

        # Moving it into team b again takes it away from team a: told too.
        with world.server.admin() as admin:
            assert admin.put("/api/v1/prompts/tmp-moved/team", json={"team": "b"}).status_code == 200
        for notes in (a_session.stream, a_legacy.stream, a_listen):
            notes.wait_for(PROMPTS_CHANGED)
        assert "error" in a_session.rpc("prompts/get", {"name": "tmp-moved"})
        assert "result" in b_session.rpc("prompts/get", {"name": "tmp-moved"})
    finally:
        with world.server.admin() as admin:
            admin.delete("/api/v1/prompts/tmp-moved")
        for agent in (a_session, b_session, a_legacy):
            agent.close()
        a_listen.reader.close()


def test_a_replay_shows_team_a_nothing_of_a_team_b_change(world: World) -> None:
    a_agent, b_agent = SessionAgent(world, "agent-a"), SessionAgent(world, "agent-b")
    try:
        a_position, b_position = a_agent.open_stream(), b_agent.open_stream()
        assert a_agent.stream is not None and b_agent.stream is not None
        a_agent.stream.reader.close()
        b_agent.stream.reader.close()
        time.sleep(0.3)  # both disconnected: what follows comes by replay only

        _edit_description(world, "tools", "tool-b", f"tool of b, replayed {time.time()}")
        a_agent.open_stream(last_event_id=a_position)
        b_agent.open_stream(last_event_id=b_position)
        b_agent.stream.wait_for(TOOLS_CHANGED)
        assert a_agent.stream.drain(1.0) == [], "the replay showed team a a team b change"
        a_agent.stream.reader.close()
        b_agent.stream.reader.close()
        time.sleep(0.3)

        # A b change, then a global one, while both are away: a is replayed the global one only.
        _edit_description(world, "tools", "tool-b", f"tool of b, again {time.time()}")
        _edit_description(world, "prompts", "p-g", f"prompt of g, replayed {time.time()}")
        a_agent.open_stream(last_event_id=a_position)
        b_agent.open_stream(last_event_id=b_position)
        b_agent.stream.wait_for(TOOLS_CHANGED)
        b_agent.stream.wait_for(PROMPTS_CHANGED)
        a_agent.stream.wait_for(PROMPTS_CHANGED)
        assert a_agent.stream.drain(0.5) == []
    finally:
        a_agent.close()
        b_agent.close()


def test_team_b_changes_stay_in_team_b_across_replicas(tmp_path: Path, postgres_server_url: str | None) -> None:
    """Replica B delivers what an edit through replica A's admin API changed: the audience comes
    with the change log (PostgreSQL NOTIFY, then the rows), so B filters exactly as A would."""
    server_url = require_postgres(postgres_server_url)
    with replica_pair(server_url, tmp_path) as (a, b):
        with a.admin() as admin:
            _created(admin.post("/api/v1/teams", json={"name": "b"}))
            _created(admin.post("/api/v1/tools", json=_tool("tool-b", description="b's", team="b")))
            tokens = {}
            for agent, teams in (("agent-a", {}), ("agent-b", {"b": "viewer"})):
                made = _created(admin.post("/api/v1/tokens", json={"name": agent, "scopes": ["agent"], "teams": teams}))
                tokens[agent] = made["token"]
        world = World(b, tokens={**tokens, "admin": b.admin_token})
        agents = {agent: SessionAgent(world, agent) for agent in ("agent-a", "agent-b")}
        try:
            for agent in agents.values():
                agent.open_stream()
            listens = {agent: open_listen(world, agent, {"toolsListChanged": True}) for agent in agents}
            with a.admin() as admin:  # through the other replica
                spec = admin.get("/api/v1/tools/tool-b").json()["spec"]
                spec["description"] = "b's, edited"
                assert admin.put("/api/v1/tools/tool-b", json=spec).status_code == 200
            stream_b = agents["agent-b"].stream
            assert stream_b is not None
            stream_b.wait_for(TOOLS_CHANGED)
            listens["agent-b"].wait_for(TOOLS_CHANGED)
            stream_a = agents["agent-a"].stream
            assert stream_a is not None
            assert stream_a.drain(1.0) == [] and listens["agent-a"].drain(0.1) == []
            names = [t["name"] for t in agents["agent-a"].rpc("tools/list", {})["result"]["tools"]]
            assert "tool-b" not in names
            for listen in listens.values():
                listen.reader.close()
        finally:
            for agent in agents.values():
                agent.close()


# ---------------------------------------------------------------------------- snapshots, in-process
def _events_after(registry: Registry, after: int) -> list[ChangeEvent]:
    with registry.db.session() as session:
        return [ChangeEvent.from_row(row) for row in changes_after(session, after, limit=100_000)]


VIEWS: list[frozenset[str] | None] = [None, frozenset(), frozenset({"a"}), frozenset({"b", "c"}), frozenset({"zz"})]


def _plain_list(snapshot: CatalogSnapshot, list_name: str, visible: frozenset[str] | None) -> list[str]:
    """The list a client seeing ``visible`` is shown, worked out the plain way."""
    entries = snapshot.entries(LISTS[list_name])
    return [
        key
        for key in snapshot.keys[list_name]
        if entries[key].team is None or visible is None or entries[key].team in visible
    ]


def _paged(snapshot: CatalogSnapshot, list_name: str, visible: frozenset[str] | None, size: int) -> list[str]:
    found: list[str] = []
    after = None
    while True:
        items, after = snapshot.page(list_name, after, size, visible)
        found += [item.get("name") for item in items]
        if after is None:
            return found


@pytest.mark.parametrize("seed", [1, 2])
def test_a_snapshot_kept_current_through_team_moves_equals_a_fresh_build(registry: Registry, seed: int) -> None:
    """Creates, moves between teams and to and from global, archives and restores, applied change
    by change: every label's snapshot equals a fresh build (team key lists included), and every
    filtered page sequence is the plain filter of the whole list."""
    rng = random.Random(seed)
    catalog = registry.catalog
    for team in ("a", "b", "c"):
        registry.teams.create(team, None, actor="test")
    teams: list[str | None] = [None, "a", "b", "c"]

    async def scenario() -> None:
        cache = SnapshotCache(catalog)
        await cache.get("production")
        position = 0
        names: dict[str, list[str]] = {"prompt": [], "resource": [], "tool": []}
        for step in range(60):
            kind = rng.choice(["prompt", "resource", "tool"])
            action = rng.random()
            if action < 0.4 or not names[kind]:
                name = f"{kind[0]}{step:02d}"
                if kind == "prompt":
                    spec: dict[str, Any] = {"name": name, "template": "x"}
                elif kind == "resource":
                    template = rng.random() < 0.5
                    spec = (
                        {"name": name, "kind": "template", "uriTemplate": f"t://{name}/{{id}}", "text": "t"}
                        if template
                        else {"name": name, "kind": "static", "uri": f"s://{name}", "text": "s"}
                    )
                else:
                    spec = {"name": name, "inputSchema": {"type": "object"}, "webhook": {"url": "builtin://echo"}}
                catalog.create(kind, spec, WriteOptions(actor="test"), team=rng.choice(teams))
                names[kind].append(name)
            elif action < 0.85:
                catalog.set_team(kind, rng.choice(names[kind]), rng.choice(teams), WriteOptions(actor="test"))
            else:
                name = rng.choice(names[kind])
                catalog.set_archived(kind, name, catalog.get(kind, name).archived is False, WriteOptions(actor="test"))
            if rng.random() < 0.4:  # batches of a few changes
                events = _events_after(registry, position)
                if events:
                    await cache.apply(events)
                    position = events[-1].id
        events = _events_after(registry, position)
        if events:
            await cache.apply(events)
        served = cache.peek("production")
        assert served is not None
        fresh = CatalogSnapshot.build(catalog, "production")
        assert served.state() == fresh.state()
        assert any(served.team_keys[name] for name in LISTS), "the walk made no team entries"
        for list_name in LISTS:
            for visible in VIEWS:
                plain = _plain_list(served, list_name, visible)
                assert [item.get("name") for item in served.listed(list_name, visible)] == plain
                for size in (1, 2, 3, 100):
                    assert _paged(served, list_name, visible, size) == plain, (list_name, visible, size)

    asyncio.run(scenario())


def test_no_team_entries_means_the_unfiltered_list_itself(registry: Registry) -> None:
    """The common case costs nothing: without team entries every view is the one key list."""
    registry.catalog.create("prompt", {"name": "p", "template": "x"}, WriteOptions(actor="test"))
    snapshot = CatalogSnapshot.build(registry.catalog, "production")
    for list_name in LISTS:
        assert snapshot.global_keys[list_name] is snapshot.keys[list_name]
        for visible in VIEWS:
            assert snapshot._sources(list_name, visible) == [snapshot.keys[list_name]]
            assert snapshot._sources(list_name, visible)[0] is snapshot.keys[list_name]
