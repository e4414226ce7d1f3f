"""The admin REST API for prompts, resources and tools, over real HTTP against a live server.

Every test runs on SQLite and on PostgreSQL (the ``database_url`` fixture parametrizes them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import httpx
from sqlalchemy import text

from tests.conftest import LiveServer

PROBLEM = "application/problem+json"

# A literal public address: accepted by the save-time SSRF guard without any DNS lookup.
PUBLIC_URL = "https://93.184.216.34"

PROMPT = {
    "name": "greet",
    "title": "Greeting",
    "description": "Say hello to someone",
    "tags": ["demo", "social"],
    "arguments": [{"name": "who", "required": True}],
    "template": "Hello {{ who }}!",
}
STATIC_RESOURCE = {
    "name": "handbook",
    "kind": "static",
    "uri": "docs://handbook",
    "mimeType": "text/markdown",
    "text": "# Handbook",
}
TEMPLATE_RESOURCE = {
    "name": "team-page",
    "kind": "template",
    "uriTemplate": "team://{team}/page",
    "text": "Team {{ team }}",
}
HTTP_RESOURCE = {
    "name": "status",
    "kind": "http",
    "uri": "status://service",
    "url": f"{PUBLIC_URL}/status.json",
    "cache_ttl_s": 30,
}
TOOL = {
    "name": "lookup",
    "description": "Look up an order",
    "inputSchema": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    "webhook": {"url": f"{PUBLIC_URL}/hooks/lookup"},
}


def assert_problem(response: httpx.Response, status: int, *fragments: str) -> dict[str, Any]:
    """The response is an RFC 9457 problem with this status whose detail mentions every fragment."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["status"] == status
    for fragment in fragments:
        assert fragment in body["detail"], body
    return body


def run_concurrently(*calls: Callable[[], httpx.Response]) -> list[httpx.Response]:
    """Run the calls in threads released together by one barrier; their responses, in call order."""
    barrier = threading.Barrier(len(calls))
    results: list[httpx.Response | None] = [None] * len(calls)

    def run(index: int) -> None:
        barrier.wait()
        results[index] = calls[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert all(r is not None for r in results), "a concurrent request did not finish"
    return [r for r in results if r is not None]


def version_count(live_server: LiveServer, kind: str, name: str) -> int:
    with live_server.registry.db.engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT COUNT(*) FROM entry_versions v JOIN entries e ON e.id = v.entry_id"
                " WHERE e.kind = :kind AND e.name = :name"
            ),
            {"kind": kind, "name": name},
        ).scalar_one()


def change_count(live_server: LiveServer) -> int:
    """The catalog's changes (not governance events such as the start-up admin token's)."""
    with live_server.registry.db.engine.connect() as conn:
        return conn.execute(
            text("SELECT COUNT(*) FROM changes WHERE kind IN ('prompt', 'resource', 'tool')")
        ).scalar_one()


# --------------------------------------------------------------------------- CRUD


ENTRIES = [
    ("prompts", PROMPT),
    ("resources", STATIC_RESOURCE),
    ("resources", TEMPLATE_RESOURCE),
    ("resources", HTTP_RESOURCE),
    ("tools", TOOL),
]


def test_create_get_update_every_kind(api: httpx.Client) -> None:
    for collection, body in ENTRIES:
        location = f"/api/v1/{collection}/{body['name']}"
        created = api.post(f"/api/v1/{collection}", json=body)
        assert created.status_code == 201, created.text
        assert created.headers["etag"] == '"v1"'
        assert created.headers["location"] == location
        assert created.json()["version"] == 1

        got = api.get(location)
        assert got.status_code == 200
        assert got.headers["etag"] == '"v1"'
        entry = got.json()
        assert entry["name"] == body["name"]
        assert entry["labels"] == {"latest": 1, "production": 1}
        assert entry["archived"] is False
        assert entry["author"] == "admin (REGISTRY_ADMIN_TOKEN)"
        for key in ("kind", "uri", "uriTemplate", "url", "text", "inputSchema"):
            if key in body:
                assert entry["spec"][key] == body[key], (body["name"], key)
        if "webhook" in body:  # stored with its defaults filled in
            assert entry["spec"]["webhook"] == {**body["webhook"], "method": "POST", "headers": {}, "timeout_s": 30.0}

        changed = {**body, "description": "second version", "change_note": "edited"}
        updated = api.put(location, json=changed, headers={"If-Match": '"v1"'})
        assert updated.status_code == 200, updated.text
        assert updated.headers["etag"] == '"v2"'
        assert updated.json()["version"] == 2
        assert updated.json()["change_note"] == "edited"

        again = api.get(location)
        assert again.headers["etag"] == '"v2"'
        assert again.json()["version"] == 2
        assert again.json()["spec"]["description"] == "second version"
        assert again.json()["labels"] == {"latest": 2, "production": 2}
        assert [v["version"] for v in api.get(f"{location}/versions").json()["items"]] == [2, 1]

    assert [i["uri"] for i in api.get("/api/v1/resources").json()["items"]] == [
        "docs://handbook",
        "status://service",
        "team://{team}/page",
    ]
    # The template shorthand is stored as one user text message; tags are kept sorted.
    spec = api.get("/api/v1/prompts/greet").json()["spec"]
    assert spec["messages"] == [{"role": "user", "content": {"type": "text", "text": "Hello {{ who }}!"}}]
    assert spec["tags"] == ["demo", "social"]


def test_list_pagination_tag_filter_and_search(api: httpx.Client) -> None:
    for i in range(5):
        body = {
            "name": f"p{i}",
            "description": "about invoices" if i % 2 == 0 else "about shipping",
            "tags": ["billing"] if i < 2 else ["ops"],
            "template": "static text",
        }
        api.post("/api/v1/prompts", json=body).raise_for_status()

    page = api.get("/api/v1/prompts", params={"limit": 2, "offset": 0}).json()
    assert (page["total"], page["limit"], page["offset"]) == (5, 2, 0)
    assert [item["name"] for item in page["items"]] == ["p0", "p1"]
    page = api.get("/api/v1/prompts", params={"limit": 2, "offset": 4}).json()
    assert page["total"] == 5
    assert [item["name"] for item in page["items"]] == ["p4"]

    tagged = api.get("/api/v1/prompts", params={"tag": "billing"}).json()
    assert [item["name"] for item in tagged["items"]] == ["p0", "p1"]
    assert tagged["total"] == 2
    assert api.get("/api/v1/prompts", params={"tag": "bill"}).json()["total"] == 0  # whole tags only

    found = api.get("/api/v1/prompts", params={"q": "INVOICE"}).json()
    assert [item["name"] for item in found["items"]] == ["p0", "p2", "p4"]
    assert api.get("/api/v1/prompts", params={"q": "shipping", "tag": "ops"}).json()["total"] == 1
    assert api.get("/api/v1/prompts", params={"q": "nothing-like-this"}).json() == {
        "items": [],
        "total": 0,
        "total_exact": True,
        "limit": 50,
        "offset": 0,
    }
    # The other collections are separate.
    assert api.get("/api/v1/tools").json()["total"] == 0
    assert_problem(api.get("/api/v1/prompts", params={"limit": 0}), 422, "limit")
    assert_problem(api.get("/api/v1/prompts", params={"limit": 501}), 422, "limit")
    assert_problem(api.get("/api/v1/prompts", params={"offset": -1}), 422, "offset")


def test_search_treats_wildcard_characters_literally(api: httpx.Client) -> None:
    for name in ("a_b", "axb", "fifty"):
        description = "50% off" if name == "fifty" else "plain"
        api.post("/api/v1/prompts", json={"name": name, "description": description, "template": "t"}).raise_for_status()
    assert [i["name"] for i in api.get("/api/v1/prompts", params={"q": "a_b"}).json()["items"]] == ["a_b"]
    assert [i["name"] for i in api.get("/api/v1/prompts", params={"q": "50%"}).json()["items"]] == ["fifty"]
    assert api.get("/api/v1/prompts", params={"q": "%"}).json()["total"] == 1


def test_archive_restore(live_server: LiveServer, api: httpx.Client) -> None:
    api.post("/api/v1/prompts", json=PROMPT).raise_for_status()
    api.post("/api/v1/prompts", json={**PROMPT, "name": "other"}).raise_for_status()

    archived = api.delete("/api/v1/prompts/greet")
    assert archived.status_code == 200
    assert archived.json()["archived"] is True

    assert [i["name"] for i in api.get("/api/v1/prompts").json()["items"]] == ["other"]
    listed = api.get("/api/v1/prompts", params={"archived": "true"}).json()
    assert [i["name"] for i in listed["items"]] == ["greet"]
    assert listed["total"] == 1
    # Still readable by name, with its history.
    assert api.get("/api/v1/prompts/greet").json()["archived"] is True

    before = version_count(live_server, "prompt", "greet")
    assert_problem(api.put("/api/v1/prompts/greet", json=PROMPT), 409, "archived")
    assert version_count(live_server, "prompt", "greet") == before
    assert_problem(api.post("/api/v1/prompts", json=PROMPT), 409, "already exists", "restore")

    restored = api.post("/api/v1/prompts/greet/restore")
    assert restored.status_code == 200
    assert restored.json()["archived"] is False
    assert [i["name"] for i in api.get("/api/v1/prompts").json()["items"]] == ["greet", "other"]
    assert api.put("/api/v1/prompts/greet", json=PROMPT).status_code == 200


def test_duplicate_name_or_uri_conflicts(live_server: LiveServer, api: httpx.Client) -> None:
    api.post("/api/v1/prompts", json=PROMPT).raise_for_status()
    api.post("/api/v1/resources", json=STATIC_RESOURCE).raise_for_status()
    changes = change_count(live_server)
    assert_problem(api.post("/api/v1/prompts", json=PROMPT), 409, "'greet' already exists")
    clash = {**STATIC_RESOURCE, "name": "handbook-copy"}
    assert_problem(api.post("/api/v1/resources", json=clash), 409, "docs://handbook")
    assert change_count(live_server) == changes
    # The same name is fine in another kind.
    assert api.post("/api/v1/tools", json={**TOOL, "name": "greet"}).status_code == 201


def test_concurrent_creates_of_one_name_give_one_201_and_one_409(live_server: LiveServer) -> None:
    with live_server.client() as first, live_server.client() as second:
        for client in (first, second):  # open the connections before the race
            client.get("/healthz").raise_for_status()
        for round_number in range(3):
            body = {**PROMPT, "name": f"race-{round_number}"}
            responses = run_concurrently(
                partial(first.post, "/api/v1/prompts", json=body),
                partial(second.post, "/api/v1/prompts", json=body),
            )
            assert sorted(r.status_code for r in responses) == [201, 409], [r.text for r in responses]
            # Refused by the name check ("already exists"), or by the unique constraint when both got past it.
            refused = next(r for r in responses if r.status_code == 409)
            assert_problem(refused, 409)
            assert any(words in refused.json()["detail"] for words in ("already exists", "is taken")), refused.text
            assert version_count(live_server, "prompt", body["name"]) == 1


# --------------------------------------------------------------------------- validation


INVALID_BODIES: list[tuple[str, str, dict[str, Any], list[str]]] = [
    ("bad-name", "prompts", {**PROMPT, "name": "bad name!"}, ["name", "pattern"]),
    ("long-name", "prompts", {"name": "x" * 129, "template": "t"}, ["name"]),
    ("prompt-missing-messages", "prompts", {"name": "no-messages"}, ["messages", "Field required"]),
    ("extra-field", "prompts", {**PROMPT, "unexpected": 1}, ["unexpected", "Extra inputs are not permitted"]),
    ("static-without-uri", "resources", {"name": "r", "kind": "static", "text": "x"}, ["needs 'uri'"]),
    ("template-without-uriTemplate", "resources", {"name": "r", "kind": "template", "text": "x"}, ["'uriTemplate'"]),
    ("http-without-url", "resources", {"name": "r", "kind": "http", "uri": "s://x"}, ["http(s) 'url'"]),
    ("tool-missing-webhook", "tools", {"name": "t"}, ["webhook", "Field required"]),
    (
        "invalid-json-schema",
        "tools",
        {**TOOL, "inputSchema": {"type": "object", "properties": {"n": {"type": "bogus"}}}},
        ["inputSchema is not a valid JSON Schema", "properties/n/type"],
    ),
    (
        "schema-not-object",
        "tools",
        {**TOOL, "inputSchema": {"type": "string"}},
        ["inputSchema must describe an object"],
    ),
    (
        "bad-webhook-scheme",
        "tools",
        {**TOOL, "webhook": {"url": "ftp://example.org/x"}},
        ["webhook url must be http(s)"],
    ),
]


def test_invalid_bodies_are_422_problems(live_server: LiveServer, api: httpx.Client) -> None:
    for case, collection, body, fragments in INVALID_BODIES:
        response = api.post(f"/api/v1/{collection}", json=body)
        assert response.status_code == 422, (case, response.text)
        body_problem = assert_problem(response, 422, *fragments)
        assert body_problem["title"] == "Invalid entry", case
        assert body_problem["errors"], case
    for collection in ("prompts", "resources", "tools"):
        assert api.get(f"/api/v1/{collection}").json()["total"] == 0
    assert change_count(live_server) == 0


def test_template_errors_are_422_and_name_the_line(api: httpx.Client) -> None:
    body = {**PROMPT, "template": "Hello\n{{ who }}\n{% if who %}unclosed\n"}
    assert_problem(api.post("/api/v1/prompts", json=body), 422, "template", "line 3")
    body = {**PROMPT, "template": "first line\nsecond {{ who "}
    assert_problem(api.post("/api/v1/prompts", json=body), 422, "line 2")

    body = {**PROMPT, "template": "Hello {{ who }}\nfrom {{ sender }}"}
    assert_problem(api.post("/api/v1/prompts", json=body), 422, "undeclared", "sender", "line 2")
    resource = {**TEMPLATE_RESOURCE, "text": "Team {{ team }} in {{ region }}"}
    assert_problem(api.post("/api/v1/resources", json=resource), 422, "undeclared", "region")
    assert api.get("/api/v1/prompts").json()["total"] == 0


def test_invalid_update_writes_nothing(live_server: LiveServer, api: httpx.Client) -> None:
    api.post("/api/v1/prompts", json=PROMPT).raise_for_status()
    changes = change_count(live_server)
    assert_problem(api.put("/api/v1/prompts/greet", json={**PROMPT, "template": "{{ nope }}"}), 422, "nope")
    assert_problem(api.put("/api/v1/prompts/greet", json={**PROMPT, "name": "renamed"}), 422, "cannot be renamed")
    assert version_count(live_server, "prompt", "greet") == 1
    assert change_count(live_server) == changes


def test_unknown_entries_and_malformed_requests_are_problems(api: httpx.Client) -> None:
    response = api.post("/api/v1/prompts", content=b"{not json", headers={"Content-Type": "application/json"})
    assert_problem(response, 422, "JSON")
    assert_problem(api.post("/api/v1/prompts", json=["a", "list"]), 422)
    assert_problem(api.get("/api/v1/prompts/missing"), 404, "'missing' does not exist")
    assert_problem(api.put("/api/v1/tools/missing", json={**TOOL, "name": "missing"}), 404, "does not exist")
    assert_problem(api.delete("/api/v1/resources/missing"), 404, "does not exist")
    assert_problem(api.get("/api/v1/prompts/missing/versions"), 404)
    api.post("/api/v1/prompts", json=PROMPT).raise_for_status()
    assert_problem(api.get("/api/v1/prompts/greet/versions/7"), 404, "no version 7")


# --------------------------------------------------------------------------- optimistic concurrency


def test_concurrent_puts_with_same_etag_one_wins(live_server: LiveServer) -> None:
    """Two editors save on top of the same version at the same moment: one 200, one 412, one new version."""
    with live_server.client() as first, live_server.client() as second:
        first.post("/api/v1/prompts", json=PROMPT).raise_for_status()
        for round_number in range(1, 4):
            etag = first.get("/api/v1/prompts/greet").headers["etag"]
            assert second.get("/api/v1/prompts/greet").headers["etag"] == etag == f'"v{round_number}"'
            changes_before = change_count(live_server)
            # New text each round: a save equal to the newest version would write nothing (and answer 200).
            bodies = [
                {**PROMPT, "template": f"Hello {{{{ who }}}} from writer {i}, round {round_number}"} for i in range(2)
            ]

            responses = run_concurrently(
                partial(first.put, "/api/v1/prompts/greet", json=bodies[0], headers={"If-Match": etag}),
                partial(second.put, "/api/v1/prompts/greet", json=bodies[1], headers={"If-Match": etag}),
            )

            assert sorted(r.status_code for r in responses) == [200, 412], [r.text for r in responses]
            winner = next(i for i, r in enumerate(responses) if r.status_code == 200)
            assert_problem(responses[1 - winner], 412, "changed")
            assert responses[winner].headers["etag"] == f'"v{round_number + 1}"'
            assert version_count(live_server, "prompt", "greet") == round_number + 1
            assert change_count(live_server) == changes_before + 1
            stored = first.get("/api/v1/prompts/greet").json()
            assert stored["version"] == round_number + 1
            assert stored["spec"]["messages"][0]["content"]["text"].endswith(f"writer {winner}, round {round_number}")


def test_stale_etag_is_412_and_writes_nothing(live_server: LiveServer, api: httpx.Client) -> None:
    api.post("/api/v1/prompts", json=PROMPT).raise_for_status()
    second = {**PROMPT, "description": "second"}
    api.put("/api/v1/prompts/greet", json=second, headers={"If-Match": '"v1"'}).raise_for_status()
    changes = change_count(live_server)

    stale = api.put("/api/v1/prompts/greet", json={**PROMPT, "description": "lost"}, headers={"If-Match": '"v1"'})
    assert_problem(stale, 412, "now version 2")
    assert version_count(live_server, "prompt", "greet") == 2
    assert change_count(live_server) == changes
    assert api.get("/api/v1/prompts/greet").json()["spec"]["description"] == "second"

    # The current ETag (also in weak form or in a list) and "*" are accepted.
    for number, if_match in enumerate(['W/"v2"', '"v1", "v3"', "*"], start=3):
        saved = api.put(
            "/api/v1/prompts/greet", json={**PROMPT, "description": f"v{number}"}, headers={"If-Match": if_match}
        )
        assert saved.status_code == 200, (if_match, saved.text)
        assert saved.headers["etag"] == f'"v{number}"'
    assert version_count(live_server, "prompt", "greet") == 5


def test_timestamps_are_utc_with_an_offset(api: httpx.Client) -> None:
    """Both databases give the same, unambiguous timestamps (SQLite does not store the zone itself)."""
    created = api.post("/api/v1/prompts", json=PROMPT).json()
    listed = api.get("/api/v1/prompts").json()["items"][0]
    versions = api.get("/api/v1/prompts/greet/versions").json()["items"]
    change = api.get("/api/v1/changes").json()["items"][0]
    token = api.get("/api/v1/tokens").json()["items"][0]
    stamps = [
        created["created_at"],
        created["updated_at"],
        listed["updated_at"],
        versions[0]["created_at"],
        change["created_at"],
        token["created_at"],
        token["last_used_at"],
    ]
    for stamp in stamps:
        parsed = datetime.fromisoformat(stamp)
        assert parsed.utcoffset() == timedelta(0), stamp
        assert abs(datetime.now(UTC) - parsed) < timedelta(minutes=5), stamp
