"""Editing entries over the admin API: PATCH (JSON Merge Patch), unchanged saves, If-Match in all its
forms, render previews that default to what agents get, and clean per-field diffs.

Each test runs against a live server on SQLite and on PostgreSQL (the ``api`` fixture).
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from registry.catalog.merge_patch import merge_patch
from registry.catalog.preconditions import MalformedPrecondition, parse_if_match
from registry.catalog.values import WriteOptions
from tests.conftest import LiveServer

README = Path(__file__).resolve().parents[2] / "README.md"
PROBLEM = "application/problem+json"
MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}

PROMPT = {
    "name": "release-notes",
    "title": "Release notes",
    "description": "Draft release notes",
    "tags": ["writing"],
    "arguments": [{"name": "changes", "required": True}],
    "template": "Write release notes for:\n{{ changes }}",
}
TOOL = {
    "name": "deploy",
    "description": "Deploy a service",
    "inputSchema": {"type": "object", "properties": {"service": {"type": "string"}}},
    "webhook": {
        "url": "https://93.184.216.34/hooks/deploy",
        "headers": {"X-Api-Key": "key-123"},
        "secret": "hook-secret",
    },
}


def counts(live_server: LiveServer, name: str) -> tuple[int, int]:
    """(versions of ``name``, rows in the change log)."""
    with live_server.registry.db.engine.connect() as conn:
        versions = conn.execute(
            text("SELECT COUNT(*) FROM entry_versions v JOIN entries e ON e.id = v.entry_id WHERE e.name = :n"),
            {"n": name},
        ).scalar_one()
        changes = conn.execute(text("SELECT COUNT(*) FROM changes")).scalar_one()
    return versions, changes


def problem(response: httpx.Response, status: int, *fragments: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = response.json()
    for fragment in fragments:
        assert fragment in body["detail"], body
    return body


def text_of(entry: dict[str, Any]) -> str:
    return str(entry["spec"]["messages"][0]["content"]["text"])


# ------------------------------------------------------------------ PATCH


def test_patch_changes_only_what_it_names(live_server: LiveServer, api: httpx.Client) -> None:
    api.post("/api/v1/prompts", json=PROMPT).raise_for_status()
    patched = api.patch(
        "/api/v1/prompts/release-notes",
        json={"template": "Write short release notes for:\n{{ changes }}", "change_note": "shorter"},
        headers={**MERGE_PATCH, "If-Match": '"v1"'},
    )
    assert patched.status_code == 200, patched.text
    assert patched.headers["etag"] == '"v2"'
    entry = patched.json()
    assert entry["version"] == 2 and entry["change_note"] == "shorter"
    assert text_of(entry) == "Write short release notes for:\n{{ changes }}"
    # Everything the patch did not name is kept (a PUT of the same body would have dropped these).
    assert entry["spec"]["description"] == "Draft release notes"
    assert entry["spec"]["title"] == "Release notes"
    assert entry["spec"]["tags"] == ["writing"]
    assert entry["spec"]["arguments"] == [{"name": "changes", "required": True}]
    assert entry["labels"] == {"latest": 2, "production": 2}


def test_patch_null_removes_and_objects_merge(api: httpx.Client) -> None:
    api.post("/api/v1/tools", json=TOOL).raise_for_status()
    # Plain application/json is accepted too.
    patched = api.patch(
        "/api/v1/tools/deploy",
        json={"description": None, "webhook": {"timeout_s": 5, "headers": {"X-Team": "payments"}}},
    )
    assert patched.status_code == 200, patched.text
    spec = patched.json()["spec"]
    assert "description" not in spec
    # The webhook object merged: url kept, timeout set, headers merged (write-only values masked).
    assert spec["webhook"]["url"] == TOOL["webhook"]["url"]
    assert spec["webhook"]["timeout_s"] == 5
    assert spec["webhook"]["headers"] == {"X-Api-Key": "********", "X-Team": "********"}
    assert spec["webhook"]["secret"] == "********"


def test_patch_keeps_write_only_values_it_does_not_name(live_server: LiveServer, api: httpx.Client) -> None:
    api.post("/api/v1/tools", json=TOOL).raise_for_status()
    api.patch("/api/v1/tools/deploy", json={"description": "Deploy one service"}).raise_for_status()
    stored = live_server.registry.drafts.latest_stored("tool", "deploy")
    assert stored is not None
    revealed = live_server.registry.catalog.reveal("tool", stored[1])["webhook"]
    assert revealed["headers"] == {"X-Api-Key": "key-123"}
    assert revealed["secret"] == "hook-secret"
    # Moving the webhook to another host without sending the credentials again is refused.
    moved = api.patch("/api/v1/tools/deploy", json={"webhook": {"url": "https://93.184.216.35/hooks/deploy"}})
    problem(moved, 422, "another origin")


def test_patch_validates_like_a_save_and_writes_nothing_when_refused(
    live_server: LiveServer, api: httpx.Client
) -> None:
    api.post("/api/v1/prompts", json=PROMPT).raise_for_status()
    before = counts(live_server, "release-notes")
    problem(api.patch("/api/v1/prompts/release-notes", json={"template": "{{ undeclared }}"}), 422, "undeclared")
    problem(api.patch("/api/v1/prompts/release-notes", json={"messages": None}), 422, "messages")
    problem(api.patch("/api/v1/prompts/release-notes", json={"name": "other"}), 422, "name")
    # Members the patch schema does not know are refused, even as null (which would remove nothing).
    problem(api.patch("/api/v1/prompts/release-notes", json={"summary": None}), 422, "summary")
    problem(api.patch("/api/v1/prompts/release-notes", json={"title": 5}), 422, "title")
    problem(api.patch("/api/v1/prompts/release-notes", json={"title": "x" * 300}), 422, "REGISTRY_LIMIT_TITLE_CHARS")
    # An invalid patch is refused as invalid even with a stale If-Match (validation first, then 412).
    stale_and_invalid = api.patch(
        "/api/v1/prompts/release-notes", json={"tags": ["no spaces"]}, headers={"If-Match": '"v9"'}
    )
    problem(stale_and_invalid, 422, "tags")
    problem(api.patch("/api/v1/prompts/missing", json={"title": "x"}), 404, "does not exist")
    assert counts(live_server, "release-notes") == before


def test_patch_with_a_stale_etag_is_412(live_server: LiveServer, api: httpx.Client) -> None:
    api.post("/api/v1/prompts", json=PROMPT).raise_for_status()
    api.patch("/api/v1/prompts/release-notes", json={"title": "Second"}).raise_for_status()
    before = counts(live_server, "release-notes")
    stale = api.patch("/api/v1/prompts/release-notes", json={"title": "Lost"}, headers={"If-Match": '"v1"'})
    problem(stale, 412, "now version 2")
    assert counts(live_server, "release-notes") == before


def _readme_body(after: str) -> dict[str, Any]:
    """The JSON body of the first ``-d '...'`` in the README's Admin API section after ``after``."""
    section = README.read_text(encoding="utf-8").split("## Admin API", 1)[1]
    rest = section[section.index(after) :]
    raw = re.search(r"-d '(\{.*?\})'", rest, re.DOTALL)
    assert raw is not None, after
    body: dict[str, Any] = json.loads(raw.group(1))
    return body


def test_the_readme_edit_example_keeps_the_description(api: httpx.Client) -> None:
    """The README's walk-through, with its own bodies: create, then edit with PATCH and If-Match
    (before, its PUT silently dropped the description)."""
    created = api.post("/api/v1/prompts", json=_readme_body("curl -s -X POST $API/prompts "))
    assert created.status_code == 201, created.text
    edited = api.patch(
        "/api/v1/prompts/release-notes",
        headers={"If-Match": created.headers["etag"], **MERGE_PATCH},
        json=_readme_body("curl -s -X PATCH $API/prompts/release-notes"),
    )
    assert edited.status_code == 200, edited.text
    assert edited.json()["spec"]["description"] == "Draft release notes"
    assert edited.json()["labels"] == {"latest": 2, "production": 1, "staging": 2}
    assert "short release notes" in text_of(edited.json())


# ------------------------------------------------------------------ unchanged saves


def test_an_unchanged_put_writes_nothing(live_server: LiveServer, api: httpx.Client) -> None:
    api.post("/api/v1/prompts", json=PROMPT).raise_for_status()
    before = counts(live_server, "release-notes")
    same = api.put(
        "/api/v1/prompts/release-notes", json={**PROMPT, "change_note": "again"}, headers={"If-Match": '"v1"'}
    )
    assert same.status_code == 200, same.text
    assert same.headers["etag"] == '"v1"'
    assert same.json()["version"] == 1
    assert same.json()["change_note"] is None  # the version that was there, untouched
    # The same definition written differently (messages instead of the template shorthand, tags
    # reordered) is the same definition.
    longhand = {**{k: v for k, v in PROMPT.items() if k != "template"}, "tags": ["writing", "writing"]}
    longhand["messages"] = [{"role": "user", "content": {"type": "text", "text": PROMPT["template"]}}]
    assert api.put("/api/v1/prompts/release-notes", json=longhand).json()["version"] == 1
    assert counts(live_server, "release-notes") == before
    # A stale If-Match is still a 412, even for an unchanged body.
    api.put("/api/v1/prompts/release-notes", json={**PROMPT, "title": "Two"}).raise_for_status()
    problem(
        api.put("/api/v1/prompts/release-notes", json={**PROMPT, "title": "Two"}, headers={"If-Match": '"v1"'}), 412
    )


def test_an_unchanged_patch_writes_nothing(live_server: LiveServer, api: httpx.Client) -> None:
    api.post("/api/v1/prompts", json=PROMPT).raise_for_status()
    before = counts(live_server, "release-notes")
    for patch in ({}, {"title": "Release notes"}, {"template": PROMPT["template"]}, {"tags": ["writing"]}):
        answer = api.patch("/api/v1/prompts/release-notes", json=patch)
        assert answer.status_code == 200, (patch, answer.text)
        assert answer.json()["version"] == 1
    assert counts(live_server, "release-notes") == before


def test_unchanged_secrets_are_compared_decrypted(live_server: LiveServer, api: httpx.Client) -> None:
    """The stored header and secret are encrypted (each encryption differs): resending them in
    clear, or masked, is still the same tool."""
    api.post("/api/v1/tools", json=TOOL).raise_for_status()
    before = counts(live_server, "deploy")
    masked = api.get("/api/v1/tools/deploy").json()["spec"]
    assert api.put("/api/v1/tools/deploy", json=masked).json()["version"] == 1
    assert api.put("/api/v1/tools/deploy", json=TOOL).json()["version"] == 1
    assert counts(live_server, "deploy") == before
    rotated = {**TOOL, "webhook": {**TOOL["webhook"], "secret": "rotated"}}
    assert api.put("/api/v1/tools/deploy", json=rotated).json()["version"] == 2


def test_an_unchanged_save_moves_only_the_labels_it_names(live_server: LiveServer, api: httpx.Client) -> None:
    api.post("/api/v1/prompts", json=PROMPT).raise_for_status()
    staged = api.put("/api/v1/prompts/release-notes", json={**PROMPT, "title": "Two", "labels": ["staging"]})
    assert staged.json()["labels"] == {"latest": 2, "production": 1, "staging": 2}
    versions, changes = counts(live_server, "release-notes")
    # Without labels an unchanged save publishes nothing (production stays on v1)...
    same = api.put("/api/v1/prompts/release-notes", json={**PROMPT, "title": "Two"})
    assert same.json()["labels"] == {"latest": 2, "production": 1, "staging": 2}
    assert counts(live_server, "release-notes") == (versions, changes)
    # ...and with labels named, those are pointed at the current version: a label move, no version.
    moved = api.put("/api/v1/prompts/release-notes", json={**PROMPT, "title": "Two", "labels": ["production"]})
    assert moved.status_code == 200, moved.text
    assert moved.json()["labels"] == {"latest": 2, "production": 2, "staging": 2}
    assert counts(live_server, "release-notes") == (versions, changes + 1)
    last = api.get("/api/v1/changes", params={"after": 0, "limit": 1000}).json()["items"][-1]
    assert (last["action"], last["labels"], last["version"]) == ("label_moved", ["production"], 2)


# ------------------------------------------------------------------ If-Match


@pytest.mark.parametrize(
    ("value", "matches_v3"),
    [
        ('"v3"', True),
        ('W/"v3"', True),
        ('"v1", "v3"', True),
        ('"v1",W/"v3"', True),
        (' "v1" , , "v3" ', True),
        ("*", True),
        ('"v1"', False),
        ('"v33"', False),
        ('"V3"', False),
        ('"3"', False),
        ('""', False),
        ('"xyzzy"', False),
    ],
)
def test_if_match_forms(value: str, matches_v3: bool) -> None:
    assert parse_if_match(value).matches(3) is matches_v3


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("v3", "quoted string"),
        ('"v3', "closing quote"),
        ("W/v3", "quoted string"),
        ('"v3" "v4"', "separated by commas"),
        ('*, "v1"', "stands alone"),
        ('"v1", *', "stands alone"),
        ("", "no entity tag"),
        (" , ", "no entity tag"),
        ('"v 3"', "may not contain"),
    ],
)
def test_malformed_if_match_is_refused_with_its_form(value: str, reason: str) -> None:
    with pytest.raises(MalformedPrecondition) as refused:
        parse_if_match(value)
    assert refused.value.status == 400
    assert reason in refused.value.detail
    assert 'If-Match: "v3"' in refused.value.detail  # says what to send instead


def test_malformed_if_match_over_http_is_400_not_412(live_server: LiveServer, api: httpx.Client) -> None:
    """Before: an unquoted ``If-Match: v3`` was answered 412 "changed since you read it (now version 3)"."""
    api.post("/api/v1/prompts", json=PROMPT).raise_for_status()
    before = counts(live_server, "release-notes")
    for method, body in ((api.put, {**PROMPT, "title": "New"}), (api.patch, {"title": "New"})):
        refused = method("/api/v1/prompts/release-notes", json=body, headers={"If-Match": "v1"})
        body = problem(refused, 400, "quoted string", 'If-Match: "v3"')
        assert body["title"] == "Malformed If-Match"
    assert counts(live_server, "release-notes") == before
    weak = api.put("/api/v1/prompts/release-notes", json={**PROMPT, "title": "New"}, headers={"If-Match": 'W/"v1"'})
    assert weak.status_code == 200, weak.text


# ------------------------------------------------------------------ previews


def test_render_preview_defaults_to_what_agents_get(api: httpx.Client) -> None:
    api.post("/api/v1/prompts", json=PROMPT).raise_for_status()
    staged = {**PROMPT, "template": "STAGED {{ changes }}", "labels": ["staging"]}
    api.put("/api/v1/prompts/release-notes", json=staged).raise_for_status()  # v2: latest and staging only

    default = api.post("/api/v1/prompts/release-notes/render", json={"arguments": {"changes": "x"}})
    assert default.status_code == 200, default.text
    body = default.json()
    assert body["messages"][0]["content"]["text"] == "Write release notes for:\nx"  # v1, not latest
    assert (body["version"], body["label"]) == (1, "production")

    staging = api.post("/api/v1/prompts/release-notes/render", json={"arguments": {"changes": "x"}, "label": "staging"})
    assert (staging.json()["version"], staging.json()["label"]) == (2, "staging")
    assert staging.json()["messages"][0]["content"]["text"] == "STAGED x"
    pinned = api.post("/api/v1/prompts/release-notes/render", json={"arguments": {"changes": "x"}, "version": 2})
    assert (pinned.json()["version"], pinned.json()["label"]) == (2, None)
    both = api.post("/api/v1/prompts/release-notes/render", json={"arguments": {}, "version": 2, "label": "staging"})
    problem(both, 422, "not both")


def test_render_preview_of_an_unpublished_prompt_says_so(api: httpx.Client) -> None:
    api.post("/api/v1/prompts", json={**PROMPT, "labels": ["staging"]}).raise_for_status()
    unpublished = api.post("/api/v1/prompts/release-notes/render", json={"arguments": {"changes": "x"}})
    problem(unpublished, 404, "no 'production' label", "agents are not served it")


# ------------------------------------------------------------------ diffs


def test_per_field_diffs_are_clean_text(api: httpx.Client) -> None:
    api.post("/api/v1/prompts", json={**PROMPT, "description": "one line"}).raise_for_status()
    second = {**PROMPT, "description": "another line", "template": "Write release notes for:\n{{ changes }}\nBe brief."}
    api.put("/api/v1/prompts/release-notes", json=second).raise_for_status()
    diff = api.get("/api/v1/prompts/release-notes/diff", params={"from": 1, "to": 2}).json()
    assert diff["changed"] == ["description", "messages"]
    assert diff["fields"]["description"] == (
        "--- v1/description\n+++ v2/description\n@@ -1 +1 @@\n-one line\n+another line\n"
    )
    assert "..." not in diff["fields"]["description"]
    assert "+      Be brief.\n" in diff["fields"]["messages"]
    assert "..." not in diff["diff"]
    # A change only in the final newline still shows.
    api.put("/api/v1/prompts/release-notes", json={**second, "description": "another line\n"}).raise_for_status()
    newline = api.get("/api/v1/prompts/release-notes/diff", params={"from": 2, "to": 3}).json()
    assert newline["fields"]["description"].endswith('-"another line"\n+"another line\\n"\n')


def test_merge_patch_follows_rfc_7396() -> None:
    """The RFC's own examples (appendix A)."""
    cases = [
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ]
    for target, patch, expected in cases:
        assert merge_patch(target, patch) == expected, (target, patch)
    original = {"a": {"b": 1}}
    merge_patch(original, {"a": {"b": 2}})
    assert original == {"a": {"b": 1}}  # neither argument is modified


def test_concurrent_patches_of_different_fields_both_land(live_server: LiveServer) -> None:
    """Each patch applies to the version it read; one that lost the race re-applies to the new one,
    so neither edit is lost (with If-Match, the loser would get 412 instead)."""
    with live_server.client() as setup:
        setup.post("/api/v1/prompts", json=PROMPT).raise_for_status()
    for round_number in range(3):
        barrier = threading.Barrier(2)
        answers: list[httpx.Response] = []

        patches = [{"title": f"title {round_number}"}, {"description": f"description {round_number}"}]
        threads = [threading.Thread(target=_patch_together, args=(live_server, barrier, answers, p)) for p in patches]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert sorted(a.status_code for a in answers) == [200, 200], [a.text for a in answers]
        with live_server.client() as check:
            spec = check.get("/api/v1/prompts/release-notes").json()["spec"]
        assert (spec["title"], spec["description"]) == (f"title {round_number}", f"description {round_number}")


def _patch_together(
    live_server: LiveServer, barrier: threading.Barrier, answers: list[httpx.Response], patch: dict[str, Any]
) -> None:
    with live_server.client() as client:
        barrier.wait()
        answers.append(client.patch("/api/v1/prompts/release-notes", json=patch))


def test_restore_a_version_copies_it_with_its_secrets_and_moves_no_served_label(
    live_server: LiveServer, api: httpx.Client
) -> None:
    api.post("/api/v1/tools", json=TOOL).raise_for_status()
    rotated = {**TOOL, "description": "Rotated", "webhook": {**TOOL["webhook"], "headers": {"X-New": "new-key"}}}
    api.put("/api/v1/tools/deploy", json={**rotated, "labels": ["staging"]}).raise_for_status()
    catalog = live_server.registry.catalog

    stale = api.post("/api/v1/tools/deploy/versions/1/restore", headers={"If-Match": '"v1"'}, json={})
    problem(stale, 412, "changed since you read it")
    missing = api.post("/api/v1/tools/deploy/versions/9/restore")
    problem(missing, 404, "has no version 9")

    restored = api.post("/api/v1/tools/deploy/versions/1/restore", headers={"If-Match": '"v2"'})
    assert restored.status_code == 200, restored.text
    body = restored.json()
    assert body["version"] == 3 and restored.headers["ETag"] == '"v3"'
    assert body["change_note"] == "Restore v1"
    # Only latest moved: production still serves v1, staging v2.
    assert body["labels"] == {"latest": 3, "production": 1, "staging": 2}
    stored = live_server.registry.drafts.latest_stored("tool", "deploy")
    assert stored is not None
    webhook = catalog.reveal("tool", stored[1])["webhook"]
    assert webhook["headers"] == {"X-Api-Key": "key-123"}  # v1's, not the newest's
    assert webhook["secret"] == "hook-secret"
    assert body["spec"]["description"] == TOOL["description"]

    before = counts(live_server, "deploy")
    again = api.post("/api/v1/tools/deploy/versions/1/restore", json={"change_note": "once more"})
    assert again.status_code == 200 and again.json()["version"] == 3, again.text
    assert counts(live_server, "deploy") == before  # the newest already says it: nothing written


def test_a_save_started_from_an_older_version_keeps_that_versions_masked_values(live_server: LiveServer) -> None:
    catalog = live_server.registry.catalog
    catalog.create("tool", TOOL, WriteOptions(actor="test"))
    catalog.update(
        "tool", "deploy", {**TOOL, "webhook": {**TOOL["webhook"], "headers": {}}}, WriteOptions(actor="test")
    )
    v1 = catalog.get("tool", "deploy", version=1).spec  # as the editor shows it: masked
    assert v1["webhook"]["headers"] == {"X-Api-Key": "********"}
    edited = {**v1, "description": "Deploy, from v1"}
    saved = catalog.update("tool", "deploy", edited, WriteOptions(actor="test", if_match='"v2"'), secrets_from=1)
    assert saved.view.version == 3
    stored = live_server.registry.drafts.latest_stored("tool", "deploy")
    assert stored is not None
    assert catalog.reveal("tool", stored[1])["webhook"]["headers"] == {"X-Api-Key": "key-123"}
    # Without it, a masked value means the newest's, which has no such header: refused.
    with pytest.raises(Exception, match="masked but has no stored value"):
        catalog.update("tool", "deploy", {**edited, "description": "again"}, WriteOptions(actor="test"), secrets_from=2)
