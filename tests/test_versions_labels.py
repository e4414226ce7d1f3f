"""Versions, diffs, labels (moves, rollback, staging), label-aware preview and the change log."""

from __future__ import annotations

import threading
from itertools import pairwise
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer

PROBLEM = "application/problem+json"

V1 = {
    "name": "triage",
    "description": "Triage a ticket",
    "arguments": [{"name": "ticket", "required": True}],
    "template": "Triage this ticket:\n{{ ticket }}\nAnswer in English.",
}
V2 = {
    "name": "triage",
    "description": "Triage a ticket",
    "arguments": [
        {"name": "ticket", "required": True},
        {"name": "tone", "enum": ["formal", "casual"], "default": "formal"},
    ],
    "template": "Triage this ticket:\n{{ ticket }}\nAnswer in a {{ tone }} tone.",
}


def assert_problem(response: httpx.Response, status: int, *fragments: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    for fragment in fragments:
        assert fragment in body["detail"], body
    return body


def changes(api: httpx.Client, after: int = 0) -> list[dict[str, Any]]:
    response = api.get("/api/v1/changes", params={"after": after, "limit": 1000})
    assert response.status_code == 200, response.text
    return response.json()["items"]


def last_change_id(api: httpx.Client) -> int:
    items = changes(api)
    return items[-1]["id"] if items else 0


@pytest.fixture
def triage(api: httpx.Client) -> httpx.Client:
    """``triage`` with two versions; production and latest on v2."""
    api.post("/api/v1/prompts", json={**V1, "change_note": "first"}).raise_for_status()
    api.put("/api/v1/prompts/triage", json={**V2, "change_note": "add tone"}).raise_for_status()
    return api


def render(api: httpx.Client, **body: Any) -> str:
    response = api.post("/api/v1/prompts/triage/render", json={"arguments": {"ticket": "T-1"}, **body})
    assert response.status_code == 200, response.text
    return response.json()["messages"][0]["content"]["text"]


def test_versions_newest_first_and_single_version(triage: httpx.Client) -> None:
    items = triage.get("/api/v1/prompts/triage/versions").json()["items"]
    assert [v["version"] for v in items] == [2, 1]
    assert [v["change_note"] for v in items] == ["add tone", "first"]
    assert items[0]["labels"] == ["latest", "production"]
    assert items[1]["labels"] == []

    v1 = triage.get("/api/v1/prompts/triage/versions/1")
    assert v1.status_code == 200
    body = v1.json()
    assert (body["version"], body["latest_version"]) == (1, 2)
    assert body["spec"]["messages"][0]["content"]["text"] == V1["template"]
    assert [a["name"] for a in body["spec"]["arguments"]] == ["ticket"]


def test_diff_shows_changed_template_lines_and_arguments(triage: httpx.Client) -> None:
    response = triage.get("/api/v1/prompts/triage/diff", params={"from": 1, "to": 2})
    assert response.status_code == 200, response.text
    diff = response.json()
    assert (diff["from"], diff["to"]) == (1, 2)
    assert diff["changed"] == ["arguments", "messages"]
    unified = diff["diff"]
    assert unified.startswith("--- triage@v1\n+++ triage@v2\n")
    lines = unified.splitlines()
    assert "-      Answer in English." in lines
    assert "+      Answer in a {{ tone }} tone." in lines
    assert "+- name: tone" in lines
    assert "-      Triage this ticket:" not in lines  # unchanged lines are context, not changes
    assert "+  default: formal" in lines
    assert "name: tone" in diff["fields"]["arguments"]
    assert "description" not in diff["fields"]

    same = triage.get("/api/v1/prompts/triage/diff", params={"from": 2, "to": 2}).json()
    assert (same["changed"], same["diff"]) == ([], "")
    assert_problem(triage.get("/api/v1/prompts/triage/diff", params={"from": 1, "to": 9}), 404, "no version 9")
    assert_problem(triage.get("/api/v1/prompts/triage/diff", params={"from": 1}), 422, "to")


def test_label_move_and_rollback(triage: httpx.Client) -> None:
    moved = triage.put("/api/v1/prompts/triage/labels/staging", json={"version": 1})
    assert moved.status_code == 200, moved.text
    assert moved.json()["labels"] == {"latest": 2, "production": 2, "staging": 1}

    # Rollback: production goes back to v1; latest stays on the newest version.
    rolled = triage.put("/api/v1/prompts/triage/labels/production", json={"version": 1})
    assert rolled.status_code == 200
    assert rolled.json()["labels"] == {"latest": 2, "production": 1, "staging": 1}
    assert render(triage, label="production") == "Triage this ticket:\nT-1\nAnswer in English."
    versions = triage.get("/api/v1/prompts/triage/versions").json()["items"]
    assert [v["labels"] for v in versions] == [["latest"], ["production", "staging"]]

    assert_problem(triage.put("/api/v1/prompts/triage/labels/production", json={"version": 5}), 404, "no version 5")
    assert_problem(triage.put("/api/v1/prompts/triage/labels/production", json={"version": 0}), 422)
    assert_problem(triage.put("/api/v1/prompts/triage/labels/Bad%20Label", json={"version": 1}), 422, "invalid label")

    deleted = triage.delete("/api/v1/prompts/triage/labels/staging")
    assert deleted.status_code == 200
    assert "staging" not in deleted.json()["labels"]
    assert_problem(triage.delete("/api/v1/prompts/triage/labels/staging"), 404, "no label 'staging'")
    assert_problem(triage.delete("/api/v1/prompts/triage/labels/latest"), 422, "latest")


def test_latest_label_cannot_be_set(triage: httpx.Client) -> None:
    assert_problem(triage.put("/api/v1/prompts/triage/labels/latest", json={"version": 1}), 422, "'latest'")
    assert_problem(triage.put("/api/v1/prompts/triage", json={**V2, "labels": ["latest"]}), 422, "'latest'")
    assert_problem(triage.post("/api/v1/prompts", json={**V1, "name": "x", "labels": ["latest"]}), 422, "'latest'")
    assert triage.get("/api/v1/prompts/triage").json()["labels"] == {"latest": 2, "production": 2}


def test_write_to_staging_does_not_move_production(triage: httpx.Client) -> None:
    draft = {**V2, "template": "Triage this ticket:\n{{ ticket }}\nBe brief ({{ tone }}).", "labels": ["staging"]}
    saved = triage.put("/api/v1/prompts/triage", json=draft, headers={"If-Match": '"v2"'})
    assert saved.status_code == 200, saved.text
    assert saved.json()["labels"] == {"latest": 3, "production": 2, "staging": 3}
    assert render(triage, label="production") == "Triage this ticket:\nT-1\nAnswer in a formal tone."
    assert render(triage, label="staging") == "Triage this ticket:\nT-1\nBe brief (formal)."

    # Promote: move production to the staged version.
    triage.put("/api/v1/prompts/triage/labels/production", json={"version": 3}).raise_for_status()
    assert render(triage, label="production") == "Triage this ticket:\nT-1\nBe brief (formal)."

    # A new entry created for staging only gets no production label at all.
    created = triage.post("/api/v1/prompts", json={**V1, "name": "draft-only", "labels": ["staging"]})
    assert created.json()["labels"] == {"latest": 1, "staging": 1}


def test_render_preview_honours_label_and_version(triage: httpx.Client) -> None:
    triage.put("/api/v1/prompts/triage/labels/production", json={"version": 1}).raise_for_status()
    assert render(triage, version=1) == "Triage this ticket:\nT-1\nAnswer in English."
    assert render(triage, version=2) == "Triage this ticket:\nT-1\nAnswer in a formal tone."
    assert render(triage, version=2, arguments={"ticket": "T-2", "tone": "casual"}).endswith("a casual tone.")
    assert render(triage, label="production") == "Triage this ticket:\nT-1\nAnswer in English."
    assert render(triage, label="latest") == "Triage this ticket:\nT-1\nAnswer in a formal tone."
    missing = triage.post("/api/v1/prompts/triage/render", json={"arguments": {"ticket": "x"}, "label": "canary"})
    assert_problem(missing, 404, "no label 'canary'")
    missing = triage.post("/api/v1/prompts/triage/render", json={"arguments": {"ticket": "x"}, "version": 3})
    assert_problem(missing, 404, "no version 3")


def test_change_log_one_row_per_committed_change(api: httpx.Client) -> None:
    assert changes(api) == []
    api.post("/api/v1/prompts", json=V1).raise_for_status()
    api.put("/api/v1/prompts/triage", json=V2).raise_for_status()
    api.put("/api/v1/prompts/triage/labels/staging", json={"version": 1}).raise_for_status()
    api.put("/api/v1/prompts/triage/labels/production", json={"version": 1}).raise_for_status()
    api.delete("/api/v1/prompts/triage/labels/staging").raise_for_status()
    api.delete("/api/v1/prompts/triage").raise_for_status()
    api.post("/api/v1/prompts/triage/restore").raise_for_status()
    # Failed writes leave no trace.
    assert api.put("/api/v1/prompts/triage", json=V2, headers={"If-Match": '"v1"'}).status_code == 412
    assert api.post("/api/v1/prompts", json=V1).status_code == 409

    items = changes(api)
    assert [(c["action"], c["version"]) for c in items] == [
        ("created", 1),
        ("updated", 2),
        ("label_moved", 1),
        ("label_moved", 1),
        ("label_deleted", 1),
        ("archived", 2),
        ("restored", 2),
    ]
    ids = [c["id"] for c in items]
    assert all(a < b for a, b in pairwise(ids))
    assert items[0]["labels"] == ["latest", "production"]
    assert items[1]["labels"] == ["latest", "production"]
    assert items[2]["labels"] == ["staging"]
    assert items[3]["note"] == "production: 2 -> 1"
    assert all(c["kind"] == "prompt" and c["name"] == "triage" for c in items)
    assert {c["actor"] for c in items} == {"admin (REGISTRY_ADMIN_TOKEN)"}

    # ?after= returns exactly what follows, and next_after continues from there.
    page = api.get("/api/v1/changes", params={"after": ids[2], "limit": 2}).json()
    assert [c["id"] for c in page["items"]] == ids[3:5]
    assert page["next_after"] == ids[4]
    rest = api.get("/api/v1/changes", params={"after": page["next_after"]}).json()
    assert [c["id"] for c in rest["items"]] == ids[5:]
    assert api.get("/api/v1/changes", params={"after": ids[-1]}).json() == {"items": [], "next_after": ids[-1]}


def test_no_op_writes_add_no_change_rows(triage: httpx.Client) -> None:
    before = last_change_id(triage)
    # production already points at v2; archiving twice or restoring a live entry changes nothing either.
    again = triage.put("/api/v1/prompts/triage/labels/production", json={"version": 2})
    assert again.status_code == 200
    assert again.json()["labels"]["production"] == 2
    assert triage.post("/api/v1/prompts/triage/restore").status_code == 200
    assert last_change_id(triage) == before

    triage.put("/api/v1/prompts/triage/labels/production", json={"version": 1}).raise_for_status()
    assert [c["action"] for c in changes(triage, before)] == ["label_moved"]
    moved = last_change_id(triage)
    triage.put("/api/v1/prompts/triage/labels/production", json={"version": 1}).raise_for_status()
    triage.delete("/api/v1/prompts/triage").raise_for_status()
    triage.delete("/api/v1/prompts/triage").raise_for_status()
    assert [c["action"] for c in changes(triage, moved)] == ["archived"]


def test_concurrent_writers_get_distinct_increasing_change_ids(live_server: LiveServer) -> None:
    """Writers on different entries at once: every committed change appears once, ids strictly increasing."""
    writers, per_writer = 4, 4
    barrier = threading.Barrier(writers)
    failures: list[str] = []

    def write(index: int) -> None:
        with live_server.client() as client:
            barrier.wait()
            for n in range(per_writer):
                response = client.post("/api/v1/prompts", json={"name": f"w{index}-{n}", "template": "t"})
                if response.status_code != 201:
                    failures.append(response.text)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []

    with live_server.client() as client:
        items = changes(client)
    ids = [c["id"] for c in items]
    assert len(items) == writers * per_writer
    assert ids == sorted(set(ids))
    assert sorted(c["name"] for c in items) == sorted(f"w{i}-{n}" for i in range(writers) for n in range(per_writer))
