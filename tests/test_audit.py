"""The audit trail: who did what (token, user, reason) for every kind of write, read back through
``/api/v1/audit`` with filters, pages and per-team visibility; its hash chain verified by the API,
the CLI and the function alike, and a row edited or deleted by hand in the database reported by
all three. Governance events (``append_event``) sit in the same chained log but reach no agent:
no notification, live or replayed, and no snapshot error. On SQLite and PostgreSQL."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import text

from registry.catalog.activity import recent_changes
from registry.catalog.audit_verify import verify_audit
from registry.db.audit import Actor
from registry.db.changelog import append_change, append_event
from registry.db.models import Team
from tests.conftest import LiveServer, run_cli
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient
from tests.stream_listener import StreamListener
from tests.waiting import wait_until

LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}
PROMPT = {
    "description": "A prompt the audit tests write",
    "arguments": [{"name": "who", "required": True}],
    "template": "Hello {{ who }}",
}


def _events(server: LiveServer) -> list[int]:
    """Append one governance event of each kind, as the governance services do; their ids."""
    ids = []
    with server.registry.db.session() as session:
        for kind, name in (("team", "payments"), ("token", "ci-bot"), ("label", "production"), ("change_request", "7")):
            row = append_event(
                session, kind=kind, name=name, action="created", actor=Actor("root", user="root@corp"), team=None
            )
            ids.append(row.id)
    return ids


# ------------------------------------------------------------------ governance events reach no agent


def test_governance_events_notify_no_agent_live_or_replayed(
    live_server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = live_server.app.mcp
    with live_server.client() as admin:
        created = admin.post("/api/v1/prompts", json={"name": "quiet", **PROMPT})
        assert created.status_code == 201, created.text
        client = StreamableHttpClient(httpx.Client(base_url=live_server.url, timeout=15, verify=TLS))
        client.initialize("2025-11-25")
        assert client.session_id is not None
        listener = StreamListener(live_server.url, client.session_id)
        try:
            assert listener.next().data == ""  # priming event: the stream is registered
            saved = admin.put("/api/v1/prompts/quiet", json={**PROMPT, "title": "Quiet v2"})
            assert saved.status_code == 200, saved.text
            first = listener.next()
            assert first.json() == LIST_CHANGED
            seen_id = first.id

            events = _events(live_server)
            # The feed reads them (the next poll), hands them to the snapshots and moves past them ...
            wait_until(lambda: runtime.feed.position >= events[-1], "the change feed to pass the governance events")
            assert runtime.server.snapshots.applied >= events[-1]
            # ... and nobody is told anything.
            assert listener.drain(0.5) == []

            # A catalog change after them is still told, once.
            saved = admin.put("/api/v1/prompts/quiet", json={**PROMPT, "title": "Quiet v3"})
            assert saved.status_code == 200, saved.text
            latest = listener.next()
            assert latest.json() == LIST_CHANGED
            assert listener.drain(0.3) == []
        finally:
            listener.close()

        # Resuming from before the governance events replays the catalog change only.
        resumed = StreamListener(live_server.url, client.session_id, last_event_id=seen_id)
        try:
            replayed = [event for event in resumed.drain(1.0) if event.data]
            assert [(event.id, event.json()) for event in replayed] == [(latest.id, LIST_CHANGED)]
        finally:
            resumed.close()
            client.http.close()

        listed = client_list(live_server)
        assert listed == {"quiet": "Quiet v3"}
        # /api/v1/changes and the activity page list catalog changes only; the audit trail has all.
        kinds = {c["kind"] for c in admin.get("/api/v1/changes", params={"limit": 1000}).json()["items"]}
        assert kinds == {"prompt"}
        assert {c["kind"] for c in recent_changes(live_server.registry.catalog, limit=200).items} == {"prompt"}
        audited = admin.get("/api/v1/audit", params={"limit": 500}).json()["items"]
        assert {row["kind"] for row in audited} == {"prompt", "team", "token", "label", "change_request"}
    problems = [r for r in caplog.records if r.levelname in ("WARNING", "ERROR") and r.name.startswith("registry")]
    assert not problems, [r.getMessage() for r in problems]


def client_list(server: LiveServer) -> dict[str, str]:
    client = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=15, verify=TLS))
    try:
        client.initialize("2025-11-25")
        prompts = client.request("prompts/list", {})["result"]["prompts"]
        return {p["name"]: p.get("title") for p in prompts}
    finally:
        client.http.close()


# ------------------------------------------------------------------ the trail and its chain


def _write_bundle(folder: Path) -> Path:
    prompts = folder / "bundle" / "prompts"
    prompts.mkdir(parents=True)
    for name in ("imported-a", "imported-b"):
        spec = {"name": name, **PROMPT, "template": f"Imported {name}: {{{{ who }}}}"}
        (prompts / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return folder / "bundle"


def test_every_write_is_audited_and_tampering_is_reported(
    live_server: LiveServer,
    database_url: str,
    raw: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = live_server.registry
    monkeypatch.setenv("REGISTRY_SECRET_KEY", "test-secret-key")  # the CLI verifies with the server's key
    with live_server.client() as admin:
        made = admin.post("/api/v1/tokens", json={"name": "audit-editor", "scopes": ["editor"]})
        assert made.status_code == 201, made.text
        editor_token, editor_id = made.json()["token"], made.json()["id"]

    # Writes of every kind: through the API with a token, a bulk import, a governance event.
    with live_server.client(editor_token) as editor:
        assert editor.post("/api/v1/prompts", json={"name": "audited", **PROMPT}).status_code == 201
        saved = editor.put(
            "/api/v1/prompts/audited", json={**PROMPT, "template": "Hi {{ who }}", "labels": ["staging"]}
        )
        assert saved.status_code == 200, saved.text
        moved = editor.put("/api/v1/prompts/audited/labels/production", json={"version": 2})
        assert moved.status_code == 200, moved.text
        assert editor.delete("/api/v1/prompts/audited").status_code == 200
    registry.bundles.apply_import(_write_bundle(tmp_path), actor="import")
    with registry.db.session() as session:
        event = append_event(
            session,
            kind="label",
            name="production",
            action="protected",
            actor=Actor("root", user="root@corp", reason="release freeze", override=True),
            note="2 approvals",
        )
        event_id = event.id

    with live_server.client() as admin:
        page = admin.get("/api/v1/audit", params={"order": "oldest", "limit": 500})
        assert page.status_code == 200, page.text
        rows = page.json()["items"]
        assert page.json()["next_after"] is None
        assert [r["id"] for r in rows] == sorted(r["id"] for r in rows)
        ours = [r for r in rows if r["name"] == "audited"]
        assert [r["action"] for r in ours] == ["created", "updated", "label_moved", "archived"]
        for row in ours:
            assert (row["actor"], row["token_id"], row["user"]) == ("audit-editor", editor_id, None), row
            assert row["team"] is None and not row["override"]
        imported = [r for r in rows if r["name"].startswith("imported-")]
        assert {(r["name"], r["action"], r["actor"]) for r in imported} == {
            ("imported-a", "created", "import"),
            ("imported-b", "created", "import"),
        }
        governance = rows[-1]
        assert governance["id"] == event_id
        assert governance["labels"] == [] and governance["kind"] == "label"
        assert (governance["user"], governance["reason"], governance["override"]) == (
            "root@corp",
            "release freeze",
            True,
        )
        # Each row links to the one before it.
        assert rows[0]["prev_hash"] == ""
        for before, after in pairwise(rows):
            assert after["prev_hash"] == before["hash"] and len(after["hash"]) == 64

        # Filters and pages.
        by_token = admin.get("/api/v1/audit", params={"token_id": editor_id}).json()["items"]
        assert [r["action"] for r in by_token] == ["archived", "label_moved", "updated", "created"]  # newest first
        bundle = [r for r in rows if r["kind"] == "bundle"]
        assert [(r["action"], r["actor"], r["note"]) for r in bundle] == [
            ("imported", "import", "2 entries written; labels moved: latest, production")
        ]
        assert admin.get("/api/v1/audit", params={"actor": "import"}).json()["items"] == sorted(
            [*imported, *bundle], key=lambda r: -r["id"]
        )
        assert [r["id"] for r in admin.get("/api/v1/audit", params={"override": "true"}).json()["items"]] == [event_id]
        assert [r["id"] for r in admin.get("/api/v1/audit", params={"kind": "label"}).json()["items"]] == [event_id]
        first = admin.get("/api/v1/audit", params={"limit": 2}).json()
        second = admin.get("/api/v1/audit", params={"limit": 2, "after": first["next_after"]}).json()
        assert [r["id"] for r in first["items"] + second["items"]] == [r["id"] for r in reversed(rows)][:4]
        future = admin.get("/api/v1/audit", params={"since": "2999-01-01T00:00:00Z"}).json()["items"]
        assert future == []
        assert len(admin.get("/api/v1/audit", params={"until": "2999-01-01T00:00:00+02:00"}).json()["items"]) == len(
            rows
        )
        too_many = admin.get("/api/v1/audit", params={"limit": 501})
        assert too_many.status_code == 422 and "500" in too_many.json()["detail"], too_many.text

        # Verified by the API, the CLI and the function: the same count.
        total = len(rows)
        verified = admin.get("/api/v1/audit/verify").json()
        assert (verified["intact"], verified["checked"], verified["broken"], verified["differences"]) == (
            True,
            total,
            None,
            [],
        )
        assert verified["head"]["id"] == rows[-1]["id"] and verified["head"]["mac"] == rows[-1]["hash"]
        cli = ["audit", "verify", "--database-url", database_url, "--data-dir", str(tmp_path / "cli")]
        assert run_cli(cli, capsys) == (
            0,
            f"audit chain intact: {total} changes verified, and the tables agree with it\n",
        )
        assert verify_audit(registry.db, batch=3).checked == total
        listing = ["audit", "list", "--database-url", database_url, "--data-dir", str(tmp_path / "cli")]
        code, out = run_cli([*listing, "--actor", "audit-editor", "--limit", "2"], capsys)
        assert code == 0 and out.count("\n") == 2, out
        assert (
            out.startswith(f"#{ours[3]['id']} ") and f"audit-editor (token {editor_id}) archived prompt audited" in out
        )

        # Verifying is an admin's.
        with live_server.client(editor_token) as editor:
            assert editor.get("/api/v1/audit/verify").status_code == 403

        # A row edited by hand: its note, then (restored) another's actor.
        edited, other = ours[1], imported[0]
        for row, column, value in ((edited, "note", "nothing to see"), (other, "actor", "someone-else")):
            with raw.begin() as conn:
                conn.execute(text(f"UPDATE changes SET {column} = :v WHERE id = :id"), {"v": value, "id": row["id"]})
            verdict = admin.get("/api/v1/audit/verify").json()
            before = [r["id"] for r in rows].index(row["id"])
            assert verdict["intact"] is False
            assert verdict["broken"]["id"] == row["id"], verdict
            assert "edited" in verdict["broken"]["reason"]
            assert verdict["checked"] == before
            code, out = run_cli(cli, capsys)
            assert code == 1
            assert out.startswith(f"audit chain broken at change #{row['id']}: "), out
            assert f"({before} changes before it verified)" in out
            broken = verify_audit(registry.db).broken
            assert broken is not None and broken.id == row["id"]
            with raw.begin() as conn:
                conn.execute(
                    text(f"UPDATE changes SET {column} = :v WHERE id = :id"), {"v": row[column], "id": row["id"]}
                )
            assert admin.get("/api/v1/audit/verify").json()["intact"] is True

        # A row deleted from the middle: reported at the row after it.
        gone = ours[2]
        following = rows[[r["id"] for r in rows].index(gone["id"]) + 1]
        with raw.begin() as conn:
            conn.execute(text("DELETE FROM changes WHERE id = :id"), {"id": gone["id"]})
        verdict = admin.get("/api/v1/audit/verify").json()
        assert verdict["broken"]["id"] == following["id"], verdict
        assert "prev_hash" in verdict["broken"]["reason"]
        code, out = run_cli(cli, capsys)
        assert code == 1 and f"#{following['id']}:" in out, out


def test_readers_see_their_teams_rows_and_everyones(live_server: LiveServer) -> None:
    registry = live_server.registry
    with registry.db.session() as session:
        session.add_all([Team(name="payments", created_by="root"), Team(name="ledger", created_by="root")])
        mine = append_event(session, kind="team", name="payments", action="created", actor="root", team="payments")
        theirs = append_event(session, kind="team", name="ledger", action="created", actor="root", team="ledger")
        everyone = append_event(session, kind="token", name="ci-bot", action="created", actor="root")
        hidden = append_change(
            session, kind="prompt", name="ledger-only", action="created", actor="root", labels=["latest"], team="ledger"
        )
        moved = append_change(
            session,
            kind="prompt",
            name="moved-over",
            action="team_changed",
            actor="root",
            labels=["latest"],
            team="ledger",
            audience=["ledger", "payments"],
        )
        shown = [mine.id, everyone.id, moved.id]
        all_ids = {mine.id, theirs.id, everyone.id, hidden.id, moved.id}
    token, _info = registry.tokens.create("payments-viewer", ["viewer"], teams={"payments": "viewer"})
    with live_server.client(token) as viewer:
        page = viewer.get("/api/v1/audit", params={"limit": 500})
        assert page.status_code == 200, page.text
        seen = {r["id"] for r in page.json()["items"]}
        assert seen & all_ids == set(shown)
        assert viewer.get("/api/v1/audit", params={"team": "ledger"}).json()["items"] == [
            r for r in page.json()["items"] if r["team"] == "ledger"
        ]
        assert viewer.get("/api/v1/audit/verify").status_code == 403
    with live_server.client() as admin:
        assert {r["id"] for r in admin.get("/api/v1/audit", params={"limit": 500}).json()["items"]} >= all_ids


def test_audit_verify_refuses_a_database_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere" / "registry.db"
    code, out = run_cli(["audit", "verify", "--database-url", f"sqlite:///{missing}"], capsys)
    assert code == 2 and f"no database at {missing}" in out, out
