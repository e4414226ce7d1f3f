"""What ``mcp-registry audit verify`` proves: tampering with the tables behind the trail's back,
a chain re-computed without the key, and a chain cut short (against an anchor kept elsewhere).

Each case edits a real database by hand, as someone with write access to it (and not the key)
would, and checks that verify names the table or row concerned, through the API and the CLI.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import select, text

from registry.catalog import audit_verify
from registry.catalog.audit_verify import Anchor, key_the_chain, verify_audit
from registry.catalog.values import WriteOptions
from registry.db.audit import row_content, row_hash, row_mac
from registry.db.models import Change
from tests.conftest import LiveServer, run_cli

PROMPT = {"description": "Pays the bill", "arguments": [{"name": "who", "required": True}], "template": "Pay {{ who }}"}


def ok(response: httpx.Response) -> Any:
    assert response.status_code < 300, response.text
    return response.json()


def _catalog_with_a_review(server: LiveServer) -> dict[str, Any]:
    """A prompt with two versions, production protected and moved to v2 by an approved, published
    change request (a second admin approves): every kind of row verify replays."""
    with server.client() as admin:
        ok(admin.post("/api/v1/prompts", json={"name": "pay", **PROMPT}))  # production -> v1
        ok(admin.put("/api/v1/protected-labels/production", json={}))
        ok(admin.put("/api/v1/prompts/pay", json={**PROMPT, "template": "Pay {{ who }} now", "labels": ["staging"]}))
        reviewer = ok(admin.post("/api/v1/tokens", json={"name": "second-admin", "scopes": ["admin"]}))["token"]
        opened = ok(
            admin.post(
                "/api/v1/change-requests",
                json={"kind": "prompt", "name": "pay", "label": "production", "to_version": 2},
            )
        )
    with server.client(reviewer) as second:
        ok(second.post(f"/api/v1/change-requests/{opened['id']}/approve", json={"comment": "fine"}))
    with server.client() as admin:
        ok(admin.post(f"/api/v1/change-requests/{opened['id']}/publish"))
        assert ok(admin.get("/api/v1/prompts/pay"))["labels"]["production"] == 2
        report = ok(admin.get("/api/v1/audit/verify"))
    assert report["intact"] is True and report["differences"] == [], report
    return {"request_id": opened["id"]}


def _verify(server: LiveServer, **params: Any) -> dict[str, Any]:
    with server.client() as admin:
        report: dict[str, Any] = ok(admin.get("/api/v1/audit/verify", params=params))
    return report


def _entry_id(raw: Any, name: str) -> int:
    with raw.begin() as conn:
        found: int = conn.execute(text("SELECT id FROM entries WHERE name = :n"), {"n": name}).scalar_one()
    return found


def _created_row(raw: Any, name: str) -> int:
    with raw.begin() as conn:
        found: int = conn.execute(
            text("SELECT id FROM changes WHERE name = :n AND action = 'created'"), {"n": name}
        ).scalar_one()
    return found


# ------------------------------------------------------------------ (a) a version's content


def test_a_version_rewritten_in_the_database_is_reported(
    live_server: LiveServer,
    raw: Any,
    database_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _catalog_with_a_review(live_server)
    entry_id = _entry_id(raw, "pay")
    with raw.begin() as conn:
        spec = conn.execute(
            text("SELECT spec FROM entry_versions WHERE entry_id = :e AND number = 1"), {"e": entry_id}
        ).scalar_one()
        spec = json.loads(spec) if isinstance(spec, str) else spec
        spec["messages"][0]["content"]["text"] = "Send the money to account 666"
        conn.execute(
            text("UPDATE entry_versions SET spec = :s WHERE entry_id = :e AND number = 1"),
            {"s": json.dumps(spec), "e": entry_id},
        )
    report = _verify(live_server)
    assert report["intact"] is False and report["broken"] is None
    [difference] = report["differences"]
    assert difference["table"] == "entry_versions"
    assert difference["change_id"] == _created_row(raw, "pay")
    assert "prompt 'pay' v1 is not what change" in difference["message"]

    monkeypatch.setenv("REGISTRY_SECRET_KEY", "test-secret-key")
    code, out = run_cli(
        ["audit", "verify", "--database-url", database_url, "--data-dir", str(tmp_path / "cli")], capsys
    )
    assert code == 1
    assert "the tables differ from it in 1 place" in out and "entry_versions: prompt 'pay' v1" in out, out


# ------------------------------------------------------------------ (b) a label moved in its table


def test_a_label_moved_in_the_labels_table_is_reported(live_server: LiveServer, raw: Any) -> None:
    _catalog_with_a_review(live_server)
    with raw.begin() as conn:
        conn.execute(
            text("UPDATE labels SET version = 1 WHERE entry_id = :e AND name = 'production'"),
            {"e": _entry_id(raw, "pay")},
        )
    report = _verify(live_server)
    assert report["intact"] is False
    [difference] = report["differences"]
    assert difference["table"] == "labels"
    assert "prompt 'pay' production -> v1 in the labels table" in difference["message"]
    assert "moved it to v2" in difference["message"]


# ------------------------------------------------------------------ (c) an approval inserted by hand


def test_an_approval_inserted_by_hand_is_reported(live_server: LiveServer, raw: Any) -> None:
    made = _catalog_with_a_review(live_server)
    with raw.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO change_request_reviews (request_id, verdict, reviewer, reviewer_key, comment, "
                "override_checks, created_at) VALUES (:r, 'approve', 'mallory', 'name:mallory', 'ok', :f, :t)"
            ),
            {"r": made["request_id"], "f": False, "t": datetime.now(UTC)},
        )
    report = _verify(live_server)
    assert report["intact"] is False
    [difference] = report["differences"]
    assert difference["table"] == "change_request_reviews"
    assert f"change request #{made['request_id']}" in difference["message"]
    assert "2 reviews in change_request_reviews, 1 review event in the chain" in difference["message"]


# ------------------------------------------------------------------ (d) a row rewritten and the chain re-computed


def _rewrite_chain(raw: Any, target: int, changes: dict[str, Any], rehash: Any) -> None:
    """Rewrite row ``target`` and recompute every hash from it on with ``rehash(content)``."""
    with raw.begin() as conn:
        rows = [dict(r._mapping) for r in conn.execute(text("SELECT * FROM changes ORDER BY id"))]
        prev = ""
        for row in rows:
            if row["id"] == target:
                row.update(changes)
            if row["id"] >= target:
                row["prev_hash"] = prev
                content = row_content(_Row(row))
                row.update(rehash(content))
                conn.execute(
                    text(
                        "UPDATE changes SET actor = :actor, override = :override, prev_hash = :prev_hash, "
                        "hash = :hash, chain_format = :chain_format WHERE id = :id"
                    ),
                    {k: row[k] for k in ("actor", "override", "prev_hash", "hash", "chain_format", "id")},
                )
            prev = row["hash"]


class _Row:
    """A row read as raw SQL, shaped like what ``row_content`` reads."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)
        for column in ("labels", "uris", "listing_changed", "audience"):  # SQLite hands JSON back as text
            value = values.get(column)
            if isinstance(value, str):
                setattr(self, column, orjson.loads(value))


def test_a_row_rewritten_and_rehashed_without_the_key_is_reported(live_server: LiveServer, raw: Any) -> None:
    _catalog_with_a_review(live_server)
    target = _created_row(raw, "pay")
    forged = {"actor": "someone-else", "override": True}

    # With a key that is not the audit key (say, one guessed), the format kept: broken at that row.
    _rewrite_chain(raw, target, forged, lambda c: {"hash": row_mac(c, b"a guess"), "chain_format": 2})
    report = _verify(live_server)
    assert report["intact"] is False
    assert report["broken"]["id"] == target, report
    assert "MAC does not match" in report["broken"]["reason"]

    # As plain SHA-256 (the unkeyed format), every row: nothing is keyed any more, which is refused.
    _rewrite_chain(raw, 1, forged, lambda c: {"hash": row_hash(c), "chain_format": 1})
    report = _verify(live_server)
    assert report["intact"] is False and report["broken"] is None
    assert report["keyed_from"] is None
    assert any(d["table"] == "changes" and "none of the" in d["message"] for d in report["differences"]), report
    # A restart does not key the forged chain (which would seal it): it was keyed at its upgrade.
    live_server.registry.prepare()
    report = _verify(live_server)
    assert report["intact"] is False and report["keyed_from"] is None, report


def test_rows_numbered_below_one_are_verified_too(live_server: LiveServer, raw: Any) -> None:
    """Ids are only ordered: a row slipped in before the first (id 0, or negative) is walked
    like any other, and breaks the chain there (it was shown in the trail, but never verified)."""
    _catalog_with_a_review(live_server)
    changes = Change.__table__
    with raw.begin() as conn:
        row = dict(conn.execute(select(changes).where(changes.c.action == "cr_approved")).one()._mapping)
        row.update(id=-5, actor="ciso@corp", note="approved by the CISO", hash="forged", prev_hash="")
        conn.execute(changes.insert().values(**row))
    report = _verify(live_server)
    assert report["intact"] is False
    assert report["broken"]["id"] == -5, report
    with live_server.client() as admin:  # the trail still lists it, for the auditor to see
        listed = ok(admin.get("/api/v1/audit", params={"order": "oldest", "limit": 1}))["items"]
    assert [(r["id"], r["actor"]) for r in listed] == [(-5, "ciso@corp")]


def test_a_write_during_verification_is_not_a_difference(
    live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save committed between the walk of the chain and the reading of the tables is in the
    tables but not in the walk: what it concerns is left for the next verification."""
    _catalog_with_a_review(live_server)
    original = audit_verify._compare_versions

    def save_first(*args: Any) -> None:
        live_server.registry.catalog.update(
            "prompt",
            "pay",
            {**PROMPT, "template": "Pay {{ who }} today"},
            WriteOptions(actor="meanwhile", labels=["staging"]),
        )
        original(*args)

    monkeypatch.setattr(audit_verify, "_compare_versions", save_first)
    report = verify_audit(live_server.registry.db)
    assert report.intact, report.as_dict()
    monkeypatch.undo()
    assert verify_audit(live_server.registry.db).intact  # and the next one walks it


# ------------------------------------------------------------------ truncation, against an anchor


def test_a_truncated_chain_is_caught_with_an_anchor(
    live_server: LiveServer,
    raw: Any,
    database_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _catalog_with_a_review(live_server)
    with live_server.client() as admin:
        head = ok(admin.get("/api/v1/audit/head"))
        ok(admin.put("/api/v1/prompts/pay", json={**PROMPT, "template": "Pay {{ who }} later", "labels": ["staging"]}))
    anchor_file = tmp_path / "anchor.json"
    anchor_file.write_text(json.dumps(head))
    monkeypatch.setenv("REGISTRY_SECRET_KEY", "test-secret-key")
    cli = ["audit", "verify", "--database-url", database_url, "--data-dir", str(tmp_path / "cli")]
    assert run_cli([*cli, "--anchor", str(anchor_file)], capsys)[0] == 0
    assert _verify(live_server, anchor=f"{head['id']}:{head['mac']}")["intact"] is True

    # The newest rows deleted, the anchored one among them: the shorter chain is valid on its own
    # (here the tables still show the deleted update; a careful intruder would put them back too),
    # so only the anchor tells for sure.
    with raw.begin() as conn:
        conn.execute(text("DELETE FROM changes WHERE id >= :id"), {"id": head["id"]})
    plain = verify_audit(live_server.registry.db)
    assert plain.broken is None  # without an anchor a cut-off chain verifies (the README says so)
    anchored = verify_audit(live_server.registry.db, anchor=Anchor(head["id"], head["mac"]))
    assert not anchored.intact
    assert any(
        d.table == "changes" and f"anchor's row #{head['id']} is not in the chain" in d.message
        for d in anchored.differences
    ), anchored.differences
    code, out = run_cli([*cli, "--anchor", str(anchor_file)], capsys)
    assert code == 1 and "truncated" in out, out
    api = _verify(live_server, anchor=f"{head['id']}:{head['mac']}")
    assert api["intact"] is False and any("truncated" in d["message"] for d in api["differences"])
    with live_server.client() as admin:
        assert admin.get("/api/v1/audit/verify", params={"anchor": "3"}).status_code == 422


# ------------------------------------------------------------------ governance events


def test_token_lifecycle_is_in_the_chain(live_server: LiveServer) -> None:
    with live_server.client() as admin:
        ok(admin.post("/api/v1/tokens", json={"name": "short-lived", "scopes": ["viewer"], "expires_in_days": 1}))
        other = ok(admin.post("/api/v1/tokens", json={"name": "to-revoke", "scopes": ["viewer"]}))
        ok(admin.delete(f"/api/v1/tokens/{other['id']}"))
        ok(admin.delete(f"/api/v1/tokens/{other['id']}"))  # revoking twice records it once
    tokens = live_server.registry.tokens
    assert tokens.record_expired() == 0  # nothing has expired yet
    later = datetime.now(UTC) + timedelta(days=2)
    assert tokens.record_expired(now=later) == 1
    assert tokens.record_expired(now=later) == 0  # once per token
    with live_server.client() as admin:
        rows = ok(admin.get("/api/v1/audit", params={"kind": "token", "order": "oldest"}))["items"]
    events = [(r["action"], r["name"], r["actor"]) for r in rows]
    assert ("token_created", "short-lived", "admin (REGISTRY_ADMIN_TOKEN)") in events, events
    assert ("token_revoked", "to-revoke", "admin (REGISTRY_ADMIN_TOKEN)") in events
    assert [e for e in events if e[0] == "token_revoked"] == [
        ("token_revoked", "to-revoke", "admin (REGISTRY_ADMIN_TOKEN)")
    ]
    assert ("token_expired", "short-lived", "system") in events
    assert verify_audit(live_server.registry.db).intact


# ------------------------------------------------------------------ a chain written before keys


def test_a_chain_written_before_keys_is_keyed_and_then_covered(live_server: LiveServer, raw: Any) -> None:
    """A database upgraded from before the keyed chain: its rows are plain SHA-256 without digests.
    Keying appends one keyed row covering every version written before it; a version of those
    changed afterwards is reported against that row."""
    made = _catalog_with_a_review(live_server)
    # Make every row what migration 0008 wrote: format 1, no digest or ref.
    with raw.begin() as conn:
        rows = [dict(r._mapping) for r in conn.execute(text("SELECT * FROM changes ORDER BY id"))]
        prev = ""
        for row in rows:
            row.update(prev_hash=prev, digest=None, ref=None, chain_format=1)
            row["hash"] = row_hash(row_content(_Row(row)))
            conn.execute(
                text(
                    "UPDATE changes SET prev_hash = :p, hash = :h, digest = NULL, ref = NULL, chain_format = 1 "
                    "WHERE id = :i"
                ),
                {"p": row["prev_hash"], "h": row["hash"], "i": row["id"]},
            )
            prev = row["hash"]
    db = live_server.registry.db
    assert not verify_audit(db).intact  # nothing keyed yet
    # A start that did not upgrade this database finds it unkeyed: a forgery for all it knows.
    assert key_the_chain(db) is False
    assert not verify_audit(db).intact
    # The start that upgrades it (or `mcp-registry audit key`) keys it, once.
    assert key_the_chain(db, may_key=True) is True
    assert key_the_chain(db, may_key=True) is False
    report = verify_audit(db)
    assert report.intact, report.as_dict()
    assert report.keyed_from == len(rows) + 1
    with live_server.client() as admin:
        recorded = ok(admin.get("/api/v1/audit", params={"action": "cr_recorded"}))["items"]
    assert [r["note"] for r in recorded] == [
        f"change request #{made['request_id']} as it stood when the audit chain was keyed"
    ]
    # A rollback to a version written before the keys names it without writing it: no difference.
    live_server.registry.catalog.set_label("prompt", "pay", "staging", 1, WriteOptions(actor="admin"))
    assert verify_audit(db).intact, verify_audit(db).as_dict()

    with raw.begin() as conn:
        conn.execute(
            text("UPDATE entry_versions SET change_note = 'x', spec = :s WHERE entry_id = :e AND number = 1"),
            {"s": json.dumps({"name": "pay", "messages": []}), "e": _entry_id(raw, "pay")},
        )
    report = verify_audit(db)
    # Reported against the keyed row covering it, and against the rollback that named it since.
    assert {d.table for d in report.differences} == {"entry_versions"}
    assert any("written before the chain was keyed" in d.message for d in report.differences)
    assert any("prompt 'pay' v1 is not what change" in d.message for d in report.differences)
