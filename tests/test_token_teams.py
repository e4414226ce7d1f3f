"""A token's roles and team memberships after it was made, over the admin API of a live server, on
SQLite and PostgreSQL (issue 25, item 8).

- ``PUT /api/v1/tokens/{id}/teams`` replaces a token's teams: audited, refused for revoked tokens,
  unknown teams and non-admins, and seen at once by the token's admin-API calls and MCP sessions
  (within the few seconds a verified token is otherwise cached).
- A new token may not mix ``agent`` (MCP only) with another scope; a token stored with such a mix
  before the rule keeps working and is listed as it is.
- A web UI request notes the token's last use without a write per request.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy import update

from registry.db.models import ApiToken
from registry.runtime import Registry
from tests.conftest import LiveServer
from tests.factories import prompt_body
from tests.http import TLS
from tests.interop.mcp_wire import open_session
from tests.ui.conftest import sign_in


def _ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


def _listed(client: httpx.Client) -> set[str]:
    return {item["name"] for item in _ok(client.get("/api/v1/prompts", params={"limit": 500}))["items"]}


def test_a_tokens_teams_change_is_audited_and_seen_at_once(api: httpx.Client, live_server: LiveServer) -> None:
    for team in ("alpha", "beta"):
        _ok(api.post("/api/v1/teams", json={"name": team}), 201)
    for name, team in (("a-prompt", "alpha"), ("b-prompt", "beta"), ("g-prompt", None)):
        _ok(api.post("/api/v1/prompts", json=prompt_body(name, team=team)), 201)
    made = _ok(
        api.post("/api/v1/tokens", json={"name": "member", "scopes": ["viewer"], "teams": {"alpha": "viewer"}}), 201
    )
    agent = open_session(live_server.url, made["token"])
    try:
        with live_server.client(made["token"]) as member:
            # Seen (and so cached) as an alpha member, by the admin API and by an MCP session.
            assert _listed(member) == {"a-prompt", "g-prompt"}
            mcp_names = {p["name"] for p in agent.request("prompts/list", {})["result"]["prompts"]}
            assert {"a-prompt", "g-prompt"} <= mcp_names and "b-prompt" not in mcp_names

            changed = _ok(api.put(f"/api/v1/tokens/{made['id']}/teams", json={"teams": {"beta": "editor"}}))
            assert changed["teams"] == {"beta": "editor"} and changed["id"] == made["id"]
            listed = {t["id"]: t for t in _ok(api.get("/api/v1/tokens"))["items"]}
            assert listed[made["id"]]["teams"] == {"beta": "editor"}

            # At once: the very next request of each, well within the verification cache's life.
            assert _listed(member) == {"b-prompt", "g-prompt"}
            mcp_names = {p["name"] for p in agent.request("prompts/list", {})["result"]["prompts"]}
            assert {"b-prompt", "g-prompt"} <= mcp_names and "a-prompt" not in mcp_names
            # The editor role in beta is real: the member may now edit beta's prompt.
            edited = member.put("/api/v1/prompts/b-prompt", json=prompt_body("b-prompt", "v2"))
            assert edited.status_code == 200, edited.text

            # Audited: who, which token, before and after.
            events = _ok(api.get("/api/v1/audit", params={"kind": "token", "action": "token_teams_changed"}))["items"]
            assert len(events) == 1, events
            assert events[0]["name"] == "member"
            assert "alpha:viewer -> beta:editor" in events[0]["note"]

            # The same teams again: nothing written.
            _ok(api.put(f"/api/v1/tokens/{made['id']}/teams", json={"teams": {"beta": "editor"}}))
            again = _ok(api.get("/api/v1/audit", params={"kind": "token", "action": "token_teams_changed"}))
            assert len(again["items"]) == 1

            # Leaving every team: global entries only.
            assert _ok(api.put(f"/api/v1/tokens/{made['id']}/teams", json={"teams": {}}))["teams"] == {}
            assert _listed(member) == {"g-prompt"}
    finally:
        agent.http.close()


def test_team_changes_are_refused_clearly(api: httpx.Client, live_server: LiveServer) -> None:
    _ok(api.post("/api/v1/teams", json={"name": "alpha"}), 201)
    made = _ok(api.post("/api/v1/tokens", json={"name": "t", "scopes": ["editor"]}), 201)
    path = f"/api/v1/tokens/{made['id']}/teams"
    unknown = api.put(path, json={"teams": {"nope": "viewer"}})
    assert unknown.status_code == 422 and "unknown team 'nope'" in unknown.json()["detail"]
    assert api.put(path, json={"teams": {"alpha": "boss"}}).status_code == 422
    assert api.put(path, json={"teams": {"Not A Team": "viewer"}}).status_code == 422
    assert api.put(path, json={"teams": {"alpha": "viewer"}, "scopes": ["admin"]}).status_code == 422
    missing = api.put("/api/v1/tokens/999999/teams", json={"teams": {}})
    assert missing.status_code == 404 and "does not exist" in missing.json()["detail"]
    with live_server.client(made["token"]) as editor:
        assert editor.put(path, json={"teams": {"alpha": "admin"}}).status_code == 403
    _ok(api.delete(f"/api/v1/tokens/{made['id']}"))
    revoked = api.put(path, json={"teams": {"alpha": "viewer"}})
    assert revoked.status_code == 409 and "revoked" in revoked.json()["detail"]
    assert all(t["teams"] == {} for t in _ok(api.get("/api/v1/tokens"))["items"] if t["id"] == made["id"])


def test_agent_cannot_be_mixed_with_another_scope_but_old_mixes_still_work(
    api: httpx.Client, live_server: LiveServer, registry: Registry
) -> None:
    for other in ("admin", "viewer"):
        mixed = api.post("/api/v1/tokens", json={"name": "mixed", "scopes": ["agent", other]})
        assert mixed.status_code == 422, mixed.text
        assert f"scopes agent and {other} contradict each other" in mixed.json()["detail"]
    assert not [t for t in _ok(api.get("/api/v1/tokens"))["items"] if t["name"] == "mixed"]
    # A redundant mix is no contradiction: accepted as before.
    _ok(api.post("/api/v1/tokens", json={"name": "both", "scopes": ["admin", "viewer"]}), 201)

    # A token stored with agent + viewer before the rule: listed as stored, and works as a viewer.
    old = _ok(api.post("/api/v1/tokens", json={"name": "old-mix", "scopes": ["viewer"]}), 201)
    with registry.db.session() as session:
        session.execute(update(ApiToken).where(ApiToken.id == old["id"]).values(scopes=["agent", "viewer"]))
    listed = {t["id"]: t for t in _ok(api.get("/api/v1/tokens"))["items"]}
    assert listed[old["id"]]["scopes"] == ["agent", "viewer"]
    with live_server.client(old["token"]) as viewer:
        assert viewer.get("/api/v1/prompts").status_code == 200
    # Its teams can still be changed (what it may do is not touched).
    _ok(api.post("/api/v1/teams", json={"name": "alpha"}), 201)
    changed = _ok(api.put(f"/api/v1/tokens/{old['id']}/teams", json={"teams": {"alpha": "viewer"}}))
    assert changed["scopes"] == ["agent", "viewer"] and changed["teams"] == {"alpha": "viewer"}


def test_a_web_ui_request_notes_the_tokens_use_without_a_write_per_request(
    api: httpx.Client, live_server: LiveServer, registry: Registry
) -> None:
    made = _ok(api.post("/api/v1/tokens", json={"name": "person", "scopes": ["viewer"]}), 201)

    def last_used() -> str | None:
        found = next(t for t in _ok(api.get("/api/v1/tokens"))["items"] if t["id"] == made["id"])
        value: str | None = found["last_used_at"]
        return value

    assert last_used() is None
    with httpx.Client(base_url=live_server.url, timeout=30, verify=TLS) as browser:
        assert sign_in(browser, made["token"]).status_code == 303
        signed_in_at = last_used()
        assert signed_in_at is not None, "a sign-in is a use"
        # Pretend the sign-in was long ago: the next page is a use again, written once.
        with registry.db.session() as session:
            long_ago = datetime(2026, 1, 1, tzinfo=UTC)
            session.execute(update(ApiToken).where(ApiToken.id == made["id"]).values(last_used_at=long_ago))
        stale = last_used()
        assert browser.get("/ui/").status_code == 200
        noted = last_used()
        assert noted is not None and stale is not None and noted > stale
        # Pages within CACHE_SECONDS of it write nothing more.
        for _ in range(3):
            assert browser.get("/ui/prompts").status_code == 200
        assert last_used() == noted
