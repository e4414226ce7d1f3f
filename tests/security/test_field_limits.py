"""Caps on the string fields and counts of catalog entries, and text that cannot hide what it says.

Issue 7 ("caps on string fields" and the "Also:" items): every cap is a setting, refused with a 422
problem+json naming the field and the ``REGISTRY_LIMIT_*`` setting, and nothing is written. Labels
are matched whole (Python's ``$`` let ``"prod\\n"`` through), webhook header names and values cannot
carry CR/LF, and names and titles cannot carry control or bidi characters (U+202E, U+2066-2069).

The caps are tested on a server started with small limits, which also shows they come from the
settings; one test checks a default on the shared server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from registry.limits import DEFAULT_LIMITS
from tests.security.conftest import MiB, ResponsivenessProbe, ask_healthz
from tests.serve_process import ServerProcess

RSS_BOUND = 64 * MiB
SMALL_LIMITS = {
    "title_chars": 40,
    "description_chars": 200,
    "tags": 3,
    "template_chars": 1000,
    "blob_chars": 1000,
    "schema_bytes": 2000,
    "prompt_arguments": 3,
    "prompt_messages": 3,
    "webhook_headers": 2,
    "change_note_chars": 100,
    "uri_chars": 200,
}
PUBLIC_URL = "https://93.184.216.34/hook"  # a literal public address: the SSRF guard needs no DNS


def env(limit: str) -> str:
    return "REGISTRY_LIMIT_" + limit.upper()


def over(limit: str) -> int:
    return SMALL_LIMITS[limit] + 1


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir: Path = tmp_path_factory.mktemp("small-limits")
    settings = {env(name): str(value) for name, value in SMALL_LIMITS.items()}
    # An explicit database URL: no demo catalog, whose prompts are larger than these limits.
    database_url = f"sqlite:///{(data_dir / 'registry.db').as_posix()}"
    with ServerProcess(data_dir, name="small-limits", env=settings, database_url=database_url) as process:
        yield process


@pytest.fixture
def small_probe(small: ServerProcess) -> ResponsivenessProbe:
    return ResponsivenessProbe(ask_healthz, small)


def prompt(**fields: Any) -> dict[str, Any]:
    return {"name": "capped", "template": "Hello {{ who }}", "arguments": [{"name": "who"}], **fields}


def tool(**fields: Any) -> dict[str, Any]:
    return {"name": "capped", "webhook": {"url": PUBLIC_URL}, **fields}


def image(data: str) -> dict[str, Any]:
    return {"role": "user", "content": {"type": "image", "data": data, "mimeType": "image/png"}}


def text(value: str) -> dict[str, Any]:
    return {"role": "user", "content": {"type": "text", "text": value}}


CAPS = [
    ("title", "prompts", prompt(title="t" * over("title_chars")), "title", "title_chars"),
    ("description", "prompts", prompt(description="d" * over("description_chars")), "description", "description_chars"),
    ("tags", "prompts", prompt(tags=[f"t{i}" for i in range(over("tags"))]), "tags", "tags"),
    ("template", "prompts", prompt(template="x" * over("template_chars")), "messages.0.content", "template_chars"),
    (
        "arguments",
        "prompts",
        prompt(arguments=[{"name": "who"}] + [{"name": f"a{i}"} for i in range(over("prompt_arguments") - 1)]),
        "arguments",
        "prompt_arguments",
    ),
    (
        "messages",
        "prompts",
        {"name": "capped", "messages": [text("hi")] * over("prompt_messages")},
        "messages",
        "prompt_messages",
    ),
    (
        "argument-title",
        "prompts",
        prompt(arguments=[{"name": "who", "title": "t" * over("title_chars")}]),
        "arguments.0.title",
        "title_chars",
    ),
    (
        "image-data",
        "prompts",
        {"name": "capped", "messages": [image("A" * over("blob_chars"))]},
        "messages.0.content.image.data",
        "blob_chars",
    ),
    (
        "static-text",
        "resources",
        {"name": "capped", "uri": "docs://capped", "text": "x" * over("template_chars")},
        "text",
        "template_chars",
    ),
    (
        "blob",
        "resources",
        {"name": "capped", "uri": "docs://capped-blob", "blob": "A" * over("blob_chars")},
        "blob",
        "blob_chars",
    ),
    (
        "uri",
        "resources",
        {"name": "capped", "uri": "docs://" + "u" * over("uri_chars"), "text": "x"},
        "uri",
        "uri_chars",
    ),
    (
        "schema",
        "tools",
        tool(inputSchema={"type": "object", "description": "s" * over("schema_bytes")}),
        "inputSchema",
        "schema_bytes",
    ),
    (
        "headers",
        "tools",
        tool(webhook={"url": PUBLIC_URL, "headers": {f"X-H{i}": "v" for i in range(over("webhook_headers"))}}),
        "webhook.headers",
        "webhook_headers",
    ),
    (
        "change-note",
        "prompts",
        {**prompt(), "change_note": "n" * over("change_note_chars")},
        "change_note",
        "change_note_chars",
    ),
]


def assert_refused(response: httpx.Response, loc: str, limit: str | None, *fragments: str) -> dict[str, Any]:
    """A 422 problem+json whose detail names the field and the limit, with an ``errors`` item for it."""
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    detail = problem["detail"]
    assert loc.split(".")[0] in detail, problem
    for fragment in fragments:
        assert fragment in detail, problem
    if limit is not None:
        assert env(limit) in detail, problem
        assert any(e["loc"].startswith(loc) and e.get("limit") == env(limit) for e in problem["errors"]), problem
    return problem


@pytest.mark.parametrize(("case", "collection", "body", "loc", "limit"), CAPS, ids=[c[0] for c in CAPS])
def test_field_caps_are_settings_and_refusals_name_them(
    small: ServerProcess,
    small_probe: ResponsivenessProbe,
    case: str,
    collection: str,
    body: dict[str, Any],
    loc: str,
    limit: str,
) -> None:
    body = {**body, "name": f"capped-{case}"}  # one name per case: an accepted one cannot hide the next
    before = small.rss()
    with small.admin() as api, small_probe:
        assert_refused(api.post(f"/api/v1/{collection}", json=body), loc, limit)
        assert api.get(f"/api/v1/{collection}/capped-{case}").status_code == 404, f"{case}: nothing may be written"
    small_probe.assert_responsive()
    grown = small.rss() - before
    assert grown < RSS_BOUND, f"RSS grew by {grown / MiB:.0f} MiB, bound {RSS_BOUND / MiB:.0f} MiB"


def test_values_at_the_caps_are_accepted(small: ServerProcess) -> None:
    body = prompt(
        name="at-caps",
        title="t" * SMALL_LIMITS["title_chars"],
        description="d" * SMALL_LIMITS["description_chars"],
        tags=[f"t{i}" for i in range(SMALL_LIMITS["tags"])],
        change_note="n" * SMALL_LIMITS["change_note_chars"],
    )
    with small.admin() as api:
        created = api.post("/api/v1/prompts", json=body)
        assert created.status_code == 201, created.text


def test_overlong_change_note_on_update_writes_nothing(small: ServerProcess, small_probe: ResponsivenessProbe) -> None:
    with small.admin() as api, small_probe:
        created = api.post("/api/v1/prompts", json=prompt(name="noted"))
        assert created.status_code == 201, created.text
        update = {**prompt(name="noted", template="Hi {{ who }}"), "change_note": "n" * over("change_note_chars")}
        assert_refused(api.put("/api/v1/prompts/noted", json=update), "change_note", "change_note_chars")
        versions = api.get("/api/v1/prompts/noted/versions").json()
        assert [v["version"] for v in versions["items"]] == [1], versions
    small_probe.assert_responsive()


def test_default_caps_apply_on_a_default_install(server: ServerProcess, healthz_probe: ResponsivenessProbe) -> None:
    body = prompt(name="default-capped", description="d" * (DEFAULT_LIMITS.description_chars + 1))
    before = server.rss()
    with server.admin() as api, healthz_probe:
        assert_refused(api.post("/api/v1/prompts", json=body), "description", "description_chars")
        assert api.get("/api/v1/prompts/default-capped").status_code == 404
    healthz_probe.assert_responsive()
    grown = server.rss() - before
    assert grown < RSS_BOUND, f"RSS grew by {grown / MiB:.0f} MiB, bound {RSS_BOUND / MiB:.0f} MiB"


# ------------------------------------------------------------------ labels matched whole


@pytest.mark.parametrize("label", ["prod\n", "prod\r\n", "\nprod", "prod\x00"])
def test_labels_are_matched_whole(server: ServerProcess, label: str) -> None:
    name = "labelled-" + str(sum(map(ord, label)))
    with server.admin() as api:
        created = api.post("/api/v1/prompts", json={**prompt(name=name), "labels": [label]})
        assert_refused(created, "label", None, "invalid label")
        assert api.get(f"/api/v1/prompts/{name}").status_code == 404
        moved = api.put(f"/api/v1/prompts/summarize/labels/{quote(label, safe='')}", json={"version": 1})
        assert_refused(moved, "label", None, "invalid label")
        token = api.post("/api/v1/tokens", json={"name": f"agent-{name}", "scopes": ["agent"], "label": label})
        assert token.status_code == 422, token.text
        labels = api.get("/api/v1/prompts/summarize").json()["labels"]
        assert not any(c in existing for existing in labels for c in "\r\n\x00"), labels


def test_a_valid_label_still_works(server: ServerProcess) -> None:
    with server.admin() as api:
        created = api.post("/api/v1/prompts", json={**prompt(name="labelled-ok"), "labels": ["prod-2.eu_west"]})
        assert created.status_code == 201, created.text
        assert "prod-2.eu_west" in created.json()["labels"]


# ------------------------------------------------------------------ header injection, invisible characters


@pytest.mark.parametrize(
    ("headers", "fragment"),
    [
        ({"Authorization": "Bearer x\r\nX-Injected: 1"}, "U+000D"),
        ({"Authorization": "Bearer x\nX-Injected: 1"}, "U+000A"),
        ({"Authorization": "Bearer \x00x"}, "U+0000"),
        ({"X-Bad Name": "v"}, "not an HTTP token"),
        ({"X-Injected: 1\r\nX-Other": "v"}, "not an HTTP token"),
    ],
)
def test_webhook_headers_cannot_inject(server: ServerProcess, headers: dict[str, str], fragment: str) -> None:
    name = "injected-" + str(sum(map(ord, repr(headers))))
    with server.admin() as api:
        refused = api.post("/api/v1/tools", json=tool(name=name, webhook={"url": PUBLIC_URL, "headers": headers}))
        assert_refused(refused, "webhook.headers", None, fragment)
        assert api.get(f"/api/v1/tools/{name}").status_code == 404


TITLES = [
    ("prompts", prompt(title="Invoice \u202egnp.exe"), "title"),
    ("prompts", prompt(title="\u2066admin\u2069"), "title"),
    ("prompts", prompt(title="two\nlines"), "title"),
    ("prompts", prompt(title="zero\u200bwidth"), "title"),
    ("prompts", prompt(arguments=[{"name": "who", "title": "w\u2067ho"}]), "arguments.0.title"),
    ("tools", tool(annotations={"title": "Delete\u202e"}), "annotations.title"),
    ("resources", {"uri": "docs://bidi", "text": "x", "title": "\x1b[31mred"}, "title"),
]


@pytest.mark.parametrize(("index", "collection", "body", "loc"), [(i, *case) for i, case in enumerate(TITLES)])
def test_titles_refuse_control_and_bidi_characters(
    server: ServerProcess, index: int, collection: str, body: dict[str, Any], loc: str
) -> None:
    name = f"bidi-{index}"
    with server.admin() as api:
        refused = api.post(f"/api/v1/{collection}", json={**body, "name": name})
        problem = assert_refused(refused, loc, None, "not allowed")
        assert any(e["loc"].startswith(loc) for e in problem["errors"]), problem
        assert api.get(f"/api/v1/{collection}/{name}").status_code == 404


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (prompt(name="bidi-arg", arguments=[{"name": "wh\u202eo"}]), "arguments.0.name"),
        (prompt(name="bi\u202edi"), "name"),
        (prompt(name="bidi\n"), "name"),
        (prompt(name="bidi\u2066"), "name"),
    ],
)
def test_names_stay_plain(server: ServerProcess, body: dict[str, Any], loc: str) -> None:
    """A regression guard: the name patterns (pydantic's Rust engine, whose $ does not accept a
    trailing newline) refused these before this change too."""
    with server.admin() as api:
        assert_refused(api.post("/api/v1/prompts", json=body), loc, None)
        names = [item["name"] for item in api.get("/api/v1/prompts", params={"limit": 500}).json()["items"]]
        assert body["name"] not in names, "nothing may be written"
        # A URL that names no possible entry is refused as such (the name pattern bounds the path too).
        looked_up = api.get(f"/api/v1/prompts/{quote(body['name'], safe='')}")
        assert looked_up.status_code == (404 if loc != "name" else 422), looked_up.text


def test_titles_keep_the_joiners_scripts_need(server: ServerProcess) -> None:
    body = prompt(name="joiners", title="\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645 \U0001f469\u200d\U0001f4bb")
    with server.admin() as api:
        created = api.post("/api/v1/prompts", json=body)
        assert created.status_code == 201, created.text
