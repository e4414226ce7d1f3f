"""Served snapshots kept current by the change log (registry/mcp/snapshot.py), on SQLite and PostgreSQL.

Issue 8: every change dropped a label's whole snapshot and the next request rebuilt it; with 20,000
prompts, 25 edits 200 ms apart made an agent wait 43 s. Now each batch of changes is applied to
the snapshots in O(changed entries) and a request never waits for it. What is checked here:

- applying any sequence of changes gives exactly what a fresh full build gives (a seeded random
  walk over create, update, label moves and deletes, archive and restore, for every kind);
- a change that lands while a label's snapshot is being built is not lost;
- when the database cannot be read the batch is retried and the last good snapshot keeps
  serving; any other failure rebuilds the label in the background;
- a large batch is applied in slices, whole changes in order, with the event loop free between them;
- parsed definitions are kept for the most recently used entries only (memory at 100,000 entries);
- on a live server with 20,000 prompts, a write through the admin API is served by the very next
  MCP request, which does not wait for any rebuild (before: seconds per request);
- list cursors are keysets: entries added or removed between two pages neither repeat nor skip one.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import partial
from typing import Any

import httpx
import pytest
from sqlalchemy import insert, select

from registry.catalog.errors import Conflict, Invalid, NotFound
from registry.catalog.listing import listing
from registry.catalog.service import CatalogService
from registry.catalog.specs import PromptSpec, ResourceSpec, ToolSpec
from registry.catalog.values import WriteOptions
from registry.db.changelog import changes_after, last_change_id
from registry.db.engine import DatabaseUnavailable
from registry.db.models import Entry, EntryVersion, Label
from registry.mcp.notifier import ChangeEvent
from registry.mcp.snapshot import CatalogSnapshot, SnapshotCache
from registry.runtime import Registry
from tests.conftest import LiveServer
from tests.factories import prompt_body, tool_body
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient

ACTOR = "test"


# ---------------------------------------------------------------------------- helpers
def _events_after(registry: Registry, after: int) -> list[ChangeEvent]:
    with registry.db.session() as session:
        return [ChangeEvent.from_row(row) for row in changes_after(session, after, limit=100_000)]


async def _apply_new(registry: Registry, cache: SnapshotCache, after: int) -> int:
    events = _events_after(registry, after)
    if events:
        await cache.apply(events)
        return events[-1].id
    return after


def _reference(catalog: CatalogService, label: str) -> dict[str, Any]:
    """What ``label`` should serve, worked out the plain way from the database (no snapshot code):
    lists in name order, each URI to the greatest name claiming it, templates in name order."""
    entries: dict[str, list[tuple[str, int]]] = {"prompt": [], "resource": [], "tool": []}
    lists: dict[str, list[dict[str, Any]]] = {"prompts": [], "resources": [], "resourceTemplates": [], "tools": []}
    uris: dict[str, tuple[str, int]] = {}
    templates: list[tuple[str, int]] = []
    for kind, name, version, stored, _team in catalog.served_entries(label):  # ordered by kind, name
        entries[kind].append((name, version))
        item = listing(kind, stored)
        if kind == "prompt":
            lists["prompts"].append(item)
        elif kind == "tool":
            lists["tools"].append(item)
        elif stored["kind"] == "template":
            lists["resourceTemplates"].append(item)
            templates.append((name, version))
        else:
            lists["resources"].append(item)
            uris[stored["uri"]] = (name, version)
    return {"entries": entries, "lists": lists, "uris": dict(sorted(uris.items())), "templates": templates}


def _projected(snapshot: CatalogSnapshot) -> dict[str, Any]:
    state = snapshot.state()
    return {
        "entries": {kind: [(name, version) for name, version, _ in found] for kind, found in state["entries"].items()},
        "lists": state["lists"],
        "uris": state["uris"],
        "templates": [(name, version) for name, version, _ in state["templates"]],
    }


def _assert_current(catalog: CatalogService, cache: SnapshotCache, context: str = "") -> None:
    """Each cached snapshot equals a fresh full build, and what the database says it should serve."""
    for label in cache.labels():
        served = cache.peek(label)
        assert served is not None
        fresh = CatalogSnapshot.build(catalog, label)
        assert served.state() == fresh.state(), f"label {label} differs from a fresh build {context}"
        assert _projected(served) == _reference(catalog, label), f"label {label} serves the wrong thing {context}"


_prompt = partial(prompt_body, arguments=("x",))


def _resource(name: str, uri: str, text: str, template: bool) -> dict[str, Any]:
    if template:
        return {"name": name, "kind": "template", "uriTemplate": uri + "/{id}", "text": text + " {{ id }}"}
    return {"name": name, "kind": "static", "uri": uri, "text": text}


_tool = partial(tool_body, properties={"message": {"type": "string"}})


def _random_change(rng: random.Random, catalog: CatalogService, step: int) -> None:
    """One random write (some refused, like an admin's would be: that is part of the walk)."""
    kind = rng.choice(["prompt", "prompt", "resource", "tool"])
    name = f"{kind[0]}{rng.randrange(6)}"
    labels = rng.choice([["production"], ["staging"], ["production", "staging"]])
    # Few URIs, so that a label can serve an old version of one resource at a URI another took since.
    uri = f"doc://{rng.randrange(3)}"
    template = rng.random() < 0.3
    text = f"text {step}"
    title = rng.choice([None, "A title", f"Title {step}"])
    action = rng.choice(["write", "write", "write", "label", "unlabel", "archive", "restore"])
    try:
        if action == "write":
            body: dict[str, Any]
            if kind == "prompt":
                body = _prompt(name, text + " {{ x }}", title=title or None)
            elif kind == "resource":
                body = _resource(name, uri, text, template)
            else:
                body = _tool(name, description=title or "echo")
            try:
                catalog.update(kind, name, body, WriteOptions(actor=ACTOR, labels=labels))
            except NotFound:
                catalog.create(kind, body, WriteOptions(actor=ACTOR, labels=labels))
        elif action == "label":
            latest = catalog.get(kind, name).latest_version
            catalog.set_label(
                kind, name, rng.choice(["production", "staging"]), rng.randint(1, latest), WriteOptions(actor=ACTOR)
            )
        elif action == "unlabel":
            catalog.delete_label(kind, name, rng.choice(["production", "staging"]), WriteOptions(actor=ACTOR))
        else:
            catalog.set_archived(kind, name, action == "archive", WriteOptions(actor=ACTOR))
    except (NotFound, Conflict, Invalid):
        pass


def _seed_prompts(registry: Registry, count: int, prefix: str = "bulk-") -> None:
    """``count`` small prompts written straight into the tables (a catalog at scale in a second)."""
    now = datetime.now(UTC)
    names = [f"{prefix}{index:06d}" for index in range(count)]
    with registry.db.session() as session:
        session.execute(
            insert(Entry),
            [
                {"kind": "prompt", "name": name, "latest_version": 1, "archived": False, "tags": ","}
                | {"created_at": now, "updated_at": now}
                for name in names
            ],
        )
        found = session.execute(select(Entry.name, Entry.id).where(Entry.name.like(prefix + "%")))
        ids = {name: entry_id for name, entry_id in found}
        session.execute(
            insert(EntryVersion),
            [
                {
                    "entry_id": ids[name],
                    "number": 1,
                    "author": "seed",
                    "created_at": now,
                    "spec": {
                        "name": name,
                        "description": f"Prompt {name}",
                        "tags": [],
                        "arguments": [{"name": "text", "required": True}],
                        "messages": [{"role": "user", "content": {"type": "text", "text": name + ": {{ text }}"}}],
                    },
                }
                for name in names
            ],
        )
        session.execute(
            insert(Label),
            [
                {"entry_id": ids[name], "name": label, "version": 1, "updated_at": now}
                for name in names
                for label in ("latest", "production")
            ],
        )


# ---------------------------------------------------------------------------- list items
def _spec_listing(kind: str, stored: dict[str, Any]) -> dict[str, Any]:
    """The list items as they were built before issue 8, from the validated pydantic models."""
    if kind == "prompt":
        prompt = PromptSpec.model_validate(stored)
        item: dict[str, Any] = {"name": prompt.name}
        if prompt.title:
            item["title"] = prompt.title
        if prompt.description:
            item["description"] = prompt.description
        arguments = []
        for arg in prompt.arguments:
            entry: dict[str, Any] = {"name": arg.name}
            if arg.title:
                entry["title"] = arg.title
            if arg.description:
                entry["description"] = arg.description
            entry["required"] = arg.required
            arguments.append(entry)
        item["arguments"] = arguments
        return item
    if kind == "resource":
        resource = ResourceSpec.model_validate(stored)
        item = {"name": resource.name}
        if resource.uriTemplate:
            item["uriTemplate"] = resource.uriTemplate
        else:
            item["uri"] = resource.uri
        for key in ("title", "description", "mimeType", "annotations"):
            value = getattr(resource, key)
            if value:
                item[key] = value
        return item
    tool = ToolSpec.model_validate(stored)
    item = {"name": tool.name}
    if tool.title:
        item["title"] = tool.title
    item["description"] = tool.description or tool.title or tool.name
    item["inputSchema"] = tool.inputSchema
    if tool.outputSchema:
        item["outputSchema"] = tool.outputSchema
    if tool.annotations:
        item["annotations"] = tool.annotations.model_dump(exclude_none=True)
    return item


def test_list_items_are_built_from_the_stored_text_as_before(registry: Registry) -> None:
    """The snapshot builds list items from the stored document without the pydantic model (a
    fraction of the time and memory at 100,000 entries): they are the same items as before."""
    registry.seed("demo")
    registry.seed("conformance")
    rows = registry.catalog.served_entries("production")
    assert len(rows) > 20
    for kind, name, _version, stored, _team in rows:
        assert listing(kind, stored) == _spec_listing(kind, stored), f"{kind} {name}"


# ---------------------------------------------------------------------------- applying changes
@pytest.mark.parametrize("seed", [1, 2])
def test_applied_changes_equal_a_fresh_build(registry: Registry, seed: int) -> None:
    """A random walk of writes, applied batch by batch (one to eight changes each), leaves every
    cached label's snapshot equal to a full build from the database: entries, versions, the four
    lists in order, which resource each URI finds, and the template order."""
    catalog = registry.catalog
    rng = random.Random(seed)

    async def scenario() -> None:
        cache = SnapshotCache(catalog)
        await cache.get("production")
        position = 0
        for step in range(70):
            for _ in range(rng.randint(1, 8)):
                _random_change(rng, catalog, step)
            if step == 10:
                await cache.get("staging")  # a label first asked for in the middle of it all
            if step == 20:
                await cache.get("latest")
            position = await _apply_new(registry, cache, position)
            _assert_current(catalog, cache, f"after step {step}")
        assert cache.labels() == ["latest", "production", "staging"]
        assert cache.applied == position

    asyncio.run(scenario())


def test_each_kind_of_change_is_applied(registry: Registry) -> None:
    catalog = registry.catalog

    async def scenario() -> None:
        cache = SnapshotCache(catalog)
        production, staging = await cache.get("production"), await cache.get("staging")
        position = 0

        async def catch_up() -> None:
            nonlocal position
            position = await _apply_new(registry, cache, position)

        catalog.create("prompt", _prompt("greet", "Hello {{ x }}"), WriteOptions(actor=ACTOR))
        await catch_up()
        assert [p["name"] for p in production.prompt_list] == ["greet"]
        assert staging.prompt_list == []

        catalog.update(
            "prompt",
            "greet",
            _prompt("greet", "Hi {{ x }}", title="Greeting"),
            WriteOptions(actor=ACTOR, labels=["staging"]),
        )
        await catch_up()
        assert production.prompts["greet"].version == 1 and staging.prompts["greet"].version == 2
        assert staging.prompt_list[0]["title"] == "Greeting" and "title" not in production.prompt_list[0]

        catalog.set_label("prompt", "greet", "production", 2, WriteOptions(actor=ACTOR))
        await catch_up()
        assert production.prompts["greet"] is staging.prompts["greet"]  # one version: one shared entry
        text = production.prompts["greet"].renderer.render({"x": "you"})["messages"][0]["content"]["text"]
        assert text == "Hi you"

        catalog.delete_label("prompt", "greet", "staging", WriteOptions(actor=ACTOR))
        await catch_up()
        assert "greet" not in staging.prompts and staging.keys["prompts"] == []

        catalog.set_archived("prompt", "greet", True, WriteOptions(actor=ACTOR))
        await catch_up()
        assert production.prompts == {} and production.prompt_list == []
        catalog.set_archived("prompt", "greet", False, WriteOptions(actor=ACTOR))
        await catch_up()
        assert list(production.prompts) == ["greet"]

        catalog.create("resource", _resource("doc", "doc://a", "A", False), WriteOptions(actor=ACTOR))
        catalog.create("resource", _resource("tpl", "tpl://t", "T", True), WriteOptions(actor=ACTOR))
        catalog.create("tool", _tool("hook", description="Echoes"), WriteOptions(actor=ACTOR))
        await catch_up()
        assert production.read_static("doc://a", None) == [{"uri": "doc://a", "text": "A"}]
        assert production.read_static("tpl://t/7", None) == [{"uri": "tpl://t/7", "text": "T 7"}]
        assert [t["name"] for t in production.tool_list] == ["hook"]
        assert production.tools["hook"].target.url == "builtin://echo"

        # A static resource that becomes a template moves from one list to the other.
        catalog.update("resource", "doc", _resource("doc", "doc://b", "B", True), WriteOptions(actor=ACTOR))
        await catch_up()
        assert production.resource_list == []
        assert [t["uriTemplate"] for t in production.template_list] == ["doc://b/{id}", "tpl://t/{id}"]
        assert production.find_resource("doc://a", None) is None
        assert production.read_static("doc://b/1", None) == [{"uri": "doc://b/1", "text": "B 1"}]
        _assert_current(catalog, cache)

    asyncio.run(scenario())


def test_a_change_during_a_build_is_not_lost(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    """A change committed after a build read the database but dispatched before the build is
    installed is applied on top of it."""
    catalog = registry.catalog
    catalog.create("prompt", _prompt("p", "v1 {{ x }}"), WriteOptions(actor=ACTOR))
    real = catalog.served_rows

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        cache = SnapshotCache(catalog)

        def served_rows_then_an_edit(label: str) -> tuple[int, list[tuple[str, str, int, str, str | None]]]:
            read = real(label)  # the build has read the catalog: v1...
            catalog.update(
                "prompt", "p", _prompt("p", "v2 {{ x }}", title="Now titled"), WriteOptions(actor=ACTOR)
            )  # ...then v2 lands
            events = _events_after(registry, read[0])
            asyncio.run_coroutine_threadsafe(cache.apply(events), loop).result(timeout=30)  # and is dispatched
            return read

        monkeypatch.setattr(catalog, "served_rows", served_rows_then_an_edit)
        snapshot = await cache.get("production")
        assert snapshot.prompts["p"].version == 2
        assert snapshot.prompt_list == [
            {"name": "p", "title": "Now titled", "arguments": [{"name": "x", "required": False}]}
        ]
        monkeypatch.setattr(catalog, "served_rows", real)
        _assert_current(catalog, cache)

    asyncio.run(scenario())


def test_unreadable_database_keeps_the_last_good_snapshot(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch that cannot be read is refused as a whole (the feed retries it) while the last good
    snapshot keeps serving; once the database answers, the retry applies it."""
    catalog = registry.catalog
    catalog.create("prompt", _prompt("p", "v1 {{ x }}"), WriteOptions(actor=ACTOR))

    async def scenario() -> None:
        cache = SnapshotCache(catalog)
        snapshot = await cache.get("production")
        before = snapshot.state()
        applied = cache.applied
        catalog.update("prompt", "p", _prompt("p", "v2 {{ x }}"), WriteOptions(actor=ACTOR))
        events = _events_after(registry, 0)[-1:]

        def down(*_args: object) -> None:
            raise DatabaseUnavailable("the database is not answering")

        monkeypatch.setattr(catalog, "served_rows_of", down)
        with pytest.raises(DatabaseUnavailable):
            await cache.apply(events)
        assert cache.peek("production") is snapshot and snapshot.state() == before  # still serving v1
        assert cache.applied == applied
        assert (await cache.get("production")).prompts["p"].version == 1  # no waiting, no error
        monkeypatch.undo()
        await cache.apply(events)  # the feed's retry
        assert snapshot.prompts["p"].version == 2
        assert cache.applied == events[-1].id

    asyncio.run(scenario())


def test_a_large_batch_is_applied_in_slices_with_loop_turns_between(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch is applied ``APPLY_SLICE`` changes at a time, in order, with the event loop free
    between slices (at 100,000 entries one 1,000-change step paused every agent): a task running
    meanwhile sees whole slices only, each a prefix of the batch; a writer waiting for an early
    change is released before the batch ends; a database outage mid-batch keeps the slices
    already in (the retry finishes the batch) and the result equals a fresh build."""
    catalog = registry.catalog
    names = [f"p{i:02d}" for i in range(10)]

    async def scenario() -> None:
        cache = SnapshotCache(catalog)
        cache.APPLY_SLICE = 3
        snapshot = await cache.get("production")
        with registry.db.session() as session:  # the start-up's governance events (the admin token) come before
            start = last_change_id(session)
        for name in names:
            catalog.create("prompt", _prompt(name, "v1 {{ x }}"), WriteOptions(actor=ACTOR))
        events = _events_after(registry, start)
        assert [event.name for event in events] == names
        seen: list[list[str]] = []
        stop = False

        async def reader() -> None:
            while True:
                current = sorted(snapshot.prompts)
                if not seen or seen[-1] != current:
                    seen.append(current)
                if stop:
                    return
                await asyncio.sleep(0)

        released: list[int] = []

        async def writer() -> None:
            await cache._wait_applied(events[1].id)
            released.append(len(snapshot.prompts))

        real = catalog.served_rows_of
        calls = 0

        def fails_on_the_third_slice(*args: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 3:
                raise DatabaseUnavailable("the database is not answering")
            return real(*args)

        monkeypatch.setattr(catalog, "served_rows_of", fails_on_the_third_slice)
        task, waiting = asyncio.create_task(reader()), asyncio.create_task(writer())
        with pytest.raises(DatabaseUnavailable):
            await cache.apply(events)
        assert sorted(snapshot.prompts) == names[:6]  # two whole slices stay served
        assert cache.applied == events[5].id
        await cache.apply(events)  # the feed's retry
        stop = True
        await task
        await waiting
        assert calls == 7  # 2 slices, the failure, then 4 slices: a read per slice
        assert seen == [names[:k] for k in (0, 3, 6, 9, 10)], f"each slice swapped in whole, in order: {seen}"
        assert released and 3 <= released[0] < 10, "the writer waits for its change, not for the batch"
        assert cache.applied == events[-1].id and snapshot.position >= events[-1].id
        _assert_current(catalog, cache)

    asyncio.run(scenario())


def test_a_failed_apply_rebuilds_in_the_background(
    registry: Registry, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    catalog = registry.catalog
    catalog.create("prompt", _prompt("p", "v1 {{ x }}"), WriteOptions(actor=ACTOR))

    async def scenario() -> None:
        cache = SnapshotCache(catalog)
        old = await cache.get("production")
        catalog.update("prompt", "p", _prompt("p", "v2 {{ x }}"), WriteOptions(actor=ACTOR))
        events = _events_after(registry, 0)[-1:]

        def broken(*_args: object) -> None:
            raise RuntimeError("a bug")

        monkeypatch.setattr(catalog, "served_rows_of", broken)
        with caplog.at_level(logging.ERROR, logger="registry.mcp"):
            await cache.apply(events)  # not raised: the feed goes on
        assert "applying changes" in caplog.text
        assert cache.peek("production") is old  # serving the old one meanwhile
        await cache._rebuilding["production"]
        rebuilt = cache.peek("production")
        assert rebuilt is not None and rebuilt is not old and rebuilt.prompts["p"].version == 2
        _assert_current(catalog, cache)

    asyncio.run(scenario())


def test_parsed_definitions_are_kept_for_recent_entries_only(registry: Registry) -> None:
    _seed_prompts(registry, 300)
    catalog = registry.catalog

    async def scenario() -> None:
        cache = SnapshotCache(catalog)
        cache.lazy.size = 50
        snapshot = await cache.get("production")
        assert len(snapshot.prompts) == 300
        assert len(cache.lazy._items) == 0  # nothing parsed until used
        for name, entry in snapshot.prompts.items():
            result = entry.renderer.render({"text": "t"})
            assert result["messages"][0]["content"]["text"] == f"{name}: t"
        assert len(cache.lazy._items) == 50

    asyncio.run(scenario())


# ---------------------------------------------------------------------------- a live server
@pytest.fixture
def large_server(registry: Registry) -> Iterator[LiveServer]:
    _seed_prompts(registry, 20_000)
    registry.seed("demo")
    server = LiveServer(registry)
    server.start()
    yield server
    server.stop()


def _mcp(server: LiveServer) -> StreamableHttpClient:
    client = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=30, verify=TLS))
    client.initialize("2025-11-25")
    return client


def test_a_write_is_served_by_the_next_request_without_a_rebuild(
    large_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read-your-writes through the admin API then MCP, at 20,000 prompts: the request right after
    each PUT is answered the new version, with no full build of the snapshot. (Before: every PUT
    dropped the snapshot and the next request waited for a rebuild of all 20,000 prompts, seconds
    each.) Counted, not timed: the server runs in this process, so its full builds can be."""
    agent = _mcp(large_server)  # the label's snapshot is built here, once
    builds: list[str] = []
    build = CatalogSnapshot.build.__func__  # type: ignore[attr-defined]

    def counted(cls: type[CatalogSnapshot], catalog: CatalogService, label: str, *args: Any) -> CatalogSnapshot:
        builds.append(label)
        return build(cls, catalog, label, *args)

    monkeypatch.setattr(CatalogSnapshot, "build", classmethod(counted))
    with large_server.client() as admin:
        for round_ in range(8):
            body = {"template": f"edit {round_}: {{{{ text }}}}", "arguments": [{"name": "text", "required": True}]}
            assert admin.put("/api/v1/prompts/bulk-000123", json=body).status_code == 200
            got = agent.request("prompts/get", {"name": "bulk-000123", "arguments": {"text": "x"}})
            assert got["result"]["messages"][0]["content"]["text"] == f"edit {round_}: x"
        created = admin.post("/api/v1/prompts", json={"name": "aaa-new", "template": "new"})
        assert created.status_code == 201, created.text
        first_page = agent.request("prompts/list")["result"]["prompts"]
        assert first_page[0]["name"] == "aaa-new"
        assert admin.delete("/api/v1/prompts/aaa-new").status_code == 200
        assert agent.request("prompts/list")["result"]["prompts"][0]["name"] != "aaa-new"
    assert builds == [], f"full snapshot builds after writes: {builds}"


def _list_all(agent: StreamableHttpClient, method: str, key: str, between: Any = None) -> list[str]:
    names: list[str] = []
    params: dict[str, Any] = {}
    pages = 0
    while True:
        result = agent.request(method, params)["result"]
        names += [item["name"] for item in result[key]]
        pages += 1
        if between is not None and pages == 1:
            between()
        if "nextCursor" not in result:
            return names
        params = {"cursor": result["nextCursor"]}


@pytest.fixture
def paged_server(registry: Registry) -> Iterator[LiveServer]:
    _seed_prompts(registry, 250, prefix="m-")
    server = LiveServer(registry)
    server.start()
    yield server
    server.stop()


def test_list_cursors_survive_inserts_and_deletes(paged_server: LiveServer) -> None:
    """Between the first and the second page, entries are added and removed before the cursor
    (and one after it): every entry present throughout is listed exactly once, in order.
    (Before: the cursor was an offset, so two deletions on page 1 skipped two entries.)"""
    agent = _mcp(paged_server)
    before = set(_list_all(agent, "prompts/list", "prompts"))
    assert len(before) == 250
    with paged_server.client() as admin:

        def edit_between_pages() -> None:
            assert admin.post("/api/v1/prompts", json={"name": "a-early", "template": "x"}).status_code == 201
            assert admin.delete("/api/v1/prompts/m-000010").status_code == 200  # on page 1
            assert admin.delete("/api/v1/prompts/m-000020").status_code == 200  # on page 1
            assert admin.post("/api/v1/prompts", json={"name": "z-late", "template": "x"}).status_code == 201

        listed = _list_all(agent, "prompts/list", "prompts", between=edit_between_pages)
    assert len(listed) == len(set(listed)), "an entry was listed twice"
    assert listed == sorted(listed)
    kept = before - {"m-000010", "m-000020"}
    assert kept <= set(listed), f"skipped: {sorted(kept - set(listed))[:5]}"
    assert "z-late" in listed and "a-early" not in listed  # added after / before the cursor


def test_invalid_cursors_are_refused(live_server: LiveServer) -> None:
    live_server.registry.seed("demo")
    agent = _mcp(live_server)

    def cursor(data: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    for bad in ["not base64!", cursor({"o": 100}), cursor({"l": "tools", "k": "a"}), cursor([[[]]]), 17, "x" * 5000]:
        answer = agent.request("prompts/list", {"cursor": bad})
        assert answer["error"]["code"] == -32602, (bad, answer)
        assert answer["error"]["message"] == "invalid cursor"
    # A cursor naming an entry that has gone since is valid: the list goes on after where it was.
    gone = agent.request("prompts/list", {"cursor": cursor({"l": "prompts", "k": "m"})})
    assert [p["name"] for p in gone["result"]["prompts"]] == ["summarize"]
