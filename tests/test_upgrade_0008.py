"""Upgrading a database of today's schema (migration 0007) with data in it to 0008 (governance).

The 0007 database is filled with plain SQL inserts of what the previous release wrote (rows as it
stored them: specs, labels, the change log, hashed tokens, open MCP and web UI sessions), then
``mcp-registry db upgrade`` runs and a real server process starts on it. Every entry must still
be readable through the admin API and over MCP, every token must keep working as before (and a
revoked or expired one stay refused), open sessions must carry on, the old change log must now
be a verified hash chain, search must still find entries, and the models must match the
migrations. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from registry.cli import main
from registry.db import migrate
from registry.db.engine import Database
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient
from tests.serve_process import ServerProcess, process_secret_key

# The database starts empty (not a migrated copy): the test builds the 0007 schema and upgrades it.
pytestmark = pytest.mark.empty_database

NOW = datetime.now(UTC).replace(microsecond=0)
T0 = NOW - timedelta(days=30)

# ------------------------------------------------------------------ the 0007 schema (what is filled)

_meta = sa.MetaData()
_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_when = sa.DateTime(timezone=True)
ENTRIES = sa.Table(
    "entries",
    _meta,
    sa.Column("id", _id),
    sa.Column("kind", sa.String),
    sa.Column("name", sa.String),
    sa.Column("uri", sa.String),
    sa.Column("latest_version", sa.Integer),
    sa.Column("archived", sa.Boolean),
    sa.Column("title", sa.String),
    sa.Column("description", sa.Text),
    sa.Column("tags", sa.String),
    sa.Column("created_at", _when),
    sa.Column("updated_at", _when),
)
VERSIONS = sa.Table(
    "entry_versions",
    _meta,
    sa.Column("id", _id),
    sa.Column("entry_id", _id),
    sa.Column("number", sa.Integer),
    sa.Column("spec", sa.JSON),
    sa.Column("author", sa.String),
    sa.Column("change_note", sa.Text),
    sa.Column("created_at", _when),
)
LABELS = sa.Table(
    "labels",
    _meta,
    sa.Column("entry_id", _id),
    sa.Column("name", sa.String),
    sa.Column("version", sa.Integer),
    sa.Column("updated_at", _when),
)
CHANGES = sa.Table(
    "changes",
    _meta,
    sa.Column("id", _id),
    sa.Column("created_at", _when),
    sa.Column("kind", sa.String),
    sa.Column("name", sa.String),
    sa.Column("action", sa.String),
    sa.Column("version", sa.Integer),
    sa.Column("labels", sa.JSON),
    sa.Column("uris", sa.JSON),
    sa.Column("actor", sa.String),
    sa.Column("note", sa.Text),
    sa.Column("listing_changed", sa.JSON),
)
TOKENS = sa.Table(
    "api_tokens",
    _meta,
    sa.Column("id", _id),
    sa.Column("name", sa.String),
    sa.Column("token_hash", sa.String),
    sa.Column("scopes", sa.JSON),
    sa.Column("label", sa.String),
    sa.Column("created_by", sa.String),
    sa.Column("created_at", _when),
    sa.Column("last_used_at", _when),
    sa.Column("revoked_at", _when),
    sa.Column("expires_at", _when),
)
MCP_SESSIONS = sa.Table(
    "mcp_sessions",
    _meta,
    sa.Column("id", sa.String),
    sa.Column("protocol_version", sa.String),
    sa.Column("label", sa.String),
    sa.Column("principal", sa.String),
    sa.Column("token_id", _id),
    sa.Column("client_info", sa.JSON),
    sa.Column("client_capabilities", sa.JSON),
    sa.Column("log_level", sa.String),
    sa.Column("subscriptions", sa.JSON),
    sa.Column("created_at", _when),
    sa.Column("last_seen_at", _when),
    sa.Column("ended_at", _when),
    sa.Column("transport", sa.String),
)
UI_SESSIONS = sa.Table(
    "ui_sessions",
    _meta,
    sa.Column("id", sa.String),
    sa.Column("token_id", _id),
    sa.Column("csrf_token", sa.String),
    sa.Column("created_at", _when),
    sa.Column("expires_at", _when),
)

# ------------------------------------------------------------------ today's data, as it was stored

GREET_ARGS = [{"name": "who", "description": "whom", "required": True}]


def _greet(text: str) -> dict[str, Any]:
    return {
        "name": "greet",
        "title": "Greeting",
        "description": "Greets someone",
        "tags": ["demo"],
        "arguments": GREET_ARGS,
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
    }


#: (id, kind, name, uri, title, description, tags, archived, versions, labels)
CATALOG: list[tuple[int, str, str, str | None, str | None, str | None, str, bool, list[Any], dict[str, int]]] = [
    (
        1,
        "prompt",
        "greet",
        None,
        "Greeting",
        "Greets someone",
        ",demo,",
        False,
        [_greet("Hello {{ who }}!"), _greet("Hi there {{ who }}!")],
        {"production": 1, "staging": 2, "latest": 2},
    ),
    (
        2,
        "resource",
        "handbook",
        "docs://handbook",
        "Handbook",
        None,
        ",",
        False,
        [
            {
                "name": "handbook",
                "title": "Handbook",
                "tags": [],
                "kind": "static",
                "uri": "docs://handbook",
                "mimeType": "text/markdown",
                "text": "# Handbook\nBe kind.",
            }
        ],
        {"production": 1, "latest": 1},
    ),
    (
        3,
        "resource",
        "team-page",
        "team://{team}/page",
        None,
        None,
        ",",
        False,
        [
            {
                "name": "team-page",
                "tags": [],
                "kind": "template",
                "uriTemplate": "team://{team}/page",
                "text": "Page of {{ team }}",
            }
        ],
        {"production": 1, "latest": 1},
    ),
    (
        4,
        "tool",
        "echo-back",
        None,
        None,
        "Echoes",
        ",",
        False,
        [
            {
                "name": "echo-back",
                "description": "Echoes",
                "tags": [],
                "inputSchema": {
                    "type": "object",
                    "properties": {"message": {"type": "string"}},
                    "required": ["message"],
                },
                "webhook": {"url": "builtin://echo", "method": "POST", "headers": {}, "timeout_s": 10.0},
            }
        ],
        {"production": 1, "latest": 1},
    ),
    (
        5,
        "prompt",
        "retired",
        None,
        None,
        "No longer used",
        ",",
        True,
        [
            {
                "name": "retired",
                "description": "No longer used",
                "tags": [],
                "arguments": [],
                "messages": [{"role": "user", "content": {"type": "text", "text": "Old words"}}],
            }
        ],
        {"production": 1, "latest": 1},
    ),
]

#: The change log as the previous release wrote it (the first row from before migration 0004,
#: without ``listing_changed``).
HISTORY: list[dict[str, Any]] = [
    {"kind": "prompt", "name": "greet", "action": "created", "version": 1, "labels": ["latest", "production"],
     "uris": [], "actor": "alice", "note": None, "listing_changed": None},
    {"kind": "prompt", "name": "greet", "action": "updated", "version": 2, "labels": ["latest", "staging"],
     "uris": [], "actor": "bob", "note": "friendlier", "listing_changed": ["staging"]},
    {"kind": "resource", "name": "handbook", "action": "created", "version": 1, "labels": ["latest", "production"],
     "uris": ["docs://handbook"], "actor": "alice", "note": None, "listing_changed": ["latest", "production"]},
    {"kind": "resource", "name": "team-page", "action": "created", "version": 1,
     "labels": ["latest", "production"], "uris": ["team://{team}/page"], "actor": "alice", "note": None,
     "listing_changed": ["latest", "production"]},
    {"kind": "tool", "name": "echo-back", "action": "created", "version": 1, "labels": ["latest", "production"],
     "uris": [], "actor": "ci-bot", "note": "from CI", "listing_changed": ["latest", "production"]},
    {"kind": "prompt", "name": "retired", "action": "created", "version": 1, "labels": ["latest", "production"],
     "uris": [], "actor": "alice", "note": None, "listing_changed": ["latest", "production"]},
    {"kind": "prompt", "name": "retired", "action": "archived", "version": None,
     "labels": ["latest", "production"], "uris": [], "actor": "alice", "note": None,
     "listing_changed": ["latest", "production"]},
]  # fmt: skip


def _token_value(name: str) -> str:
    return f"mcpr_upgrade-{name}-" + secrets.token_urlsafe(12)


class OldData:
    """What was put in the 0007 database: the token values and session secrets."""

    def __init__(self) -> None:
        self.tokens = {
            name: _token_value(name) for name in ("admin", "editor", "viewer", "agent", "revoked", "expired")
        }
        self.token_ids = {name: number for number, name in enumerate(self.tokens, start=1)}
        self.mcp_session = secrets.token_hex(16)
        self.ui_secret = secrets.token_urlsafe(32)


def fill_0007(db: Database, old: OldData) -> None:
    scopes = {"admin": ["admin"], "editor": ["editor"], "viewer": ["viewer"], "agent": ["agent"]}
    with db.engine.begin() as conn:
        for number, (entry_id, kind, name, uri, title, description, tags, archived, versions, labels) in enumerate(
            CATALOG
        ):
            created = T0 + timedelta(hours=number)
            conn.execute(
                ENTRIES.insert().values(
                    id=entry_id,
                    kind=kind,
                    name=name,
                    uri=uri,
                    latest_version=len(versions),
                    archived=archived,
                    title=title,
                    description=description,
                    tags=tags,
                    created_at=created,
                    updated_at=created + timedelta(minutes=len(versions)),
                )
            )
            for index, spec in enumerate(versions, start=1):
                conn.execute(
                    VERSIONS.insert().values(
                        entry_id=entry_id,
                        number=index,
                        spec=spec,
                        author="alice" if index == 1 else "bob",
                        change_note=None if index == 1 else "friendlier",
                        created_at=created + timedelta(minutes=index),
                    )
                )
            for label, version in labels.items():
                conn.execute(LABELS.insert().values(entry_id=entry_id, name=label, version=version, updated_at=created))
        for number, change in enumerate(HISTORY):
            conn.execute(CHANGES.insert().values(created_at=T0 + timedelta(hours=number, seconds=7), **change))
        for name, value in old.tokens.items():
            conn.execute(
                TOKENS.insert().values(
                    id=old.token_ids[name],
                    name=f"old-{name}",
                    token_hash=hashlib.sha256(value.encode()).hexdigest(),
                    scopes=scopes.get(name, ["editor"]),
                    label="staging" if name == "agent" else None,
                    created_by="cli",
                    created_at=T0,
                    last_used_at=NOW - timedelta(days=1),
                    revoked_at=T0 + timedelta(days=1) if name == "revoked" else None,
                    expires_at=NOW - timedelta(hours=1) if name == "expired" else NOW + timedelta(days=90),
                )
            )
        conn.execute(
            MCP_SESSIONS.insert().values(
                id=old.mcp_session,
                protocol_version="2025-11-25",
                label="staging",
                principal="old-agent",
                token_id=old.token_ids["agent"],
                client_info={"name": "old-client", "version": "1.0"},
                client_capabilities={},
                log_level=None,
                subscriptions=["docs://handbook"],
                created_at=NOW - timedelta(minutes=5),
                last_seen_at=NOW,
                ended_at=None,
                transport="streamable-http",
            )
        )
        conn.execute(
            UI_SESSIONS.insert().values(
                id=hashlib.sha256(old.ui_secret.encode()).hexdigest(),
                token_id=old.token_ids["admin"],
                csrf_token=secrets.token_urlsafe(32),
                created_at=NOW - timedelta(minutes=5),
                expires_at=NOW + timedelta(hours=8),
            )
        )
        if db.is_postgres:  # explicit ids were given: move the sequences past them
            for table in ("entries", "entry_versions", "changes", "api_tokens"):
                conn.execute(
                    sa.text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
                )


# ------------------------------------------------------------------ the upgrade


@pytest.fixture
def upgraded(database_url: str, tmp_path: Path) -> Iterator[tuple[ServerProcess, OldData]]:
    db = Database(database_url)
    try:
        migrate.upgrade(db, "0007")
        old = OldData()
        fill_0007(db, old)
        # What an operator runs, with the servers' key (the upgrade keys the audit chain).
        with pytest.MonkeyPatch.context() as env:
            env.setenv("REGISTRY_SECRET_KEY", process_secret_key())
            assert main(["db", "upgrade", "--database-url", database_url, "--data-dir", str(tmp_path / "cli")]) == 0
        assert migrate.is_current(db)
        migrate.check(db)  # the models and the migrations agree on the upgraded schema
    finally:
        db.dispose()
    with ServerProcess(tmp_path / "data", database_url=database_url, name="upgraded") as server:
        yield server, old


def _client(server: ServerProcess, token: str) -> httpx.Client:
    return server.client(token)


def _mcp(server: ServerProcess, token: str | None = None) -> StreamableHttpClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    client = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=30, verify=TLS), extra_headers=headers)
    client.initialize()
    return client


def test_an_upgraded_database_keeps_entries_tokens_sessions_and_history(
    upgraded: tuple[ServerProcess, OldData], database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server, old = upgraded
    tokens = old.tokens

    # Every entry is readable through the admin API, with every version and label, as before.
    with _client(server, tokens["admin"]) as admin:
        for _id, kind, name, _uri, _title, _desc, _tags, archived, versions, labels in CATALOG:
            answer = admin.get(f"/api/v1/{kind}s/{name}")
            assert answer.status_code == 200, answer.text
            entry = answer.json()
            assert entry["version"] == len(versions) and entry["archived"] is archived, entry
            assert entry["labels"] == labels, entry
            assert entry.get("team") is None  # every existing entry is global: everyone keeps seeing it
            listed = admin.get(f"/api/v1/{kind}s/{name}/versions").json()["items"]
            assert sorted(v["version"] for v in listed) == list(range(1, len(versions) + 1))
        old_v1 = admin.get("/api/v1/prompts/greet/versions/1").json()
        assert old_v1["spec"]["messages"][0]["content"]["text"] == "Hello {{ who }}!", old_v1
        # Search still finds entries (on SQLite its index is kept by triggers on `entries`).
        found = admin.get("/api/v1/prompts", params={"q": "greets some"}).json()["items"]
        assert [p["name"] for p in found] == ["greet"]
        assert [t["name"] for t in admin.get("/api/v1/tokens").json()["items"] if t["name"].startswith("old-")] == [
            f"old-{name}" for name in tokens
        ]

    # Over MCP: anonymous (production), and the old agent token (its label, staging).
    anonymous = _mcp(server)
    try:
        got = anonymous.request("prompts/get", {"name": "greet", "arguments": {"who": "Ada"}})
        assert got["result"]["messages"][0]["content"]["text"] == "Hello Ada!", got
        read = anonymous.request("resources/read", {"uri": "docs://handbook"})
        assert read["result"]["contents"][0]["text"] == "# Handbook\nBe kind.", read
        page = anonymous.request("resources/read", {"uri": "team://payments/page"})
        assert page["result"]["contents"][0]["text"] == "Page of payments", page
        tools = anonymous.request("tools/list", {})["result"]["tools"]
        assert [t["name"] for t in tools] == ["echo-back"]
        called = anonymous.request("tools/call", {"name": "echo-back", "arguments": {"message": "still here"}})
        assert called["result"].get("isError") is not True and "still here" in str(called["result"]), called
        names = [p["name"] for p in anonymous.request("prompts/list", {})["result"]["prompts"]]
        assert names == ["greet"]  # the archived one stays out of the lists
    finally:
        anonymous.http.close()
    agent = _mcp(server, tokens["agent"])
    try:
        got = agent.request("prompts/get", {"name": "greet", "arguments": {"who": "Ada"}})
        assert got["result"]["messages"][0]["content"]["text"] == "Hi there Ada!", got
    finally:
        agent.http.close()

    # The MCP session the old agent had open carries on (no new initialize).
    resumed = StreamableHttpClient(
        httpx.Client(base_url=server.url, timeout=30, verify=TLS),
        session_id=old.mcp_session,
        protocol_version="2025-11-25",
        extra_headers={"Authorization": f"Bearer {tokens['agent']}"},
    )
    try:
        listed = resumed.request("prompts/list", {})
        assert [p["name"] for p in listed["result"]["prompts"]] == ["greet"], listed
    finally:
        resumed.http.close()

    # The signed-in web UI session carries on.
    with httpx.Client(
        base_url=server.url, timeout=30, cookies={"mcpr_ui_session": old.ui_secret}, verify=TLS
    ) as browser:
        home = browser.get("/ui/", follow_redirects=False)
        assert home.status_code == 200, (home.status_code, home.headers.get("location"))
        assert "old-admin" in home.text

    # Each old token keeps what it could do; revoked and expired ones stay refused.
    spec = {"arguments": GREET_ARGS, "template": "Greetings, {{ who }}.", "labels": ["staging"]}
    with _client(server, tokens["editor"]) as editor:
        saved = editor.put("/api/v1/prompts/greet", json=spec)
        assert saved.status_code == 200, saved.text
        assert saved.json()["version"] == 3
    with _client(server, tokens["viewer"]) as viewer:
        assert viewer.get("/api/v1/prompts/greet").json()["version"] == 3
        assert viewer.put("/api/v1/prompts/greet", json=spec).status_code == 403
        assert viewer.get("/api/v1/tokens").status_code == 403
    with _client(server, tokens["agent"]) as agent_http:
        assert agent_http.get("/api/v1/prompts").status_code == 403  # MCP only, as before
    for refused in ("revoked", "expired"):
        with _client(server, tokens[refused]) as client:
            assert client.get("/api/v1/prompts").status_code == 401, refused
        answer = httpx.post(
            server.url + "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
            headers={"Authorization": f"Bearer {tokens[refused]}", "Accept": "application/json, text/event-stream"},
            timeout=30,
            verify=TLS,
        )
        assert answer.status_code == 401, (refused, answer.text)

    # The old change log is now a hash chain, verified, with the new write chained after it.
    with _client(server, tokens["admin"]) as admin:
        rows = admin.get("/api/v1/audit", params={"order": "oldest", "limit": 500}).json()["items"]
        assert [(r["kind"], r["name"], r["action"], r["actor"]) for r in rows] == [
            *((c["kind"], c["name"], c["action"], c["actor"]) for c in HISTORY),
            # The first start keyed the chain: one keyed row covering every version before it ...
            ("audit", "chain", "chain_keyed", "system"),
            # ... then the environment's admin token, new to this database, and the new write.
            ("token", "admin (REGISTRY_ADMIN_TOKEN)", "token_created", "environment"),
            ("prompt", "greet", "updated", "old-editor"),
        ]
        assert rows[-1]["token_id"] == old.token_ids["editor"]
        assert rows[0]["prev_hash"] == "" and all(b["prev_hash"] == a["hash"] for a, b in pairwise(rows))
        verified = admin.get("/api/v1/audit/verify").json()
        assert (verified["intact"], verified["checked"], verified["broken"], verified["differences"]) == (
            True,
            len(rows),
            None,
            [],
        ), verified
        assert verified["keyed_from"] == rows[len(HISTORY)]["id"]
        changes = admin.get("/api/v1/changes").json()["items"]
        # The change feed carries the catalog's changes; governance events are the audit trail's alone.
        assert [c["id"] for c in changes] == [r["id"] for r in rows if r["kind"] in ("prompt", "resource", "tool")]
    # The CLI verifies with the server's key (its REGISTRY_SECRET_KEY, as the operator would give it).
    with pytest.MonkeyPatch.context() as env:
        env.setenv("REGISTRY_SECRET_KEY", server.environment()["REGISTRY_SECRET_KEY"])
        code = main(["audit", "verify", "--database-url", database_url, "--data-dir", str(tmp_path / "cli")])
    assert code == 0
    assert f"audit chain intact: {len(rows)} changes verified" in capsys.readouterr().out
