"""Protected labels and change requests, over the admin API and MCP of real server processes.

One ``mcp-registry serve`` per database (SQLite, then PostgreSQL) with
``REGISTRY_PROTECTED_LABELS=production`` and single sign-on from the test issuer
(``tests/oidc_issuer.py``): a save leaves production alone (agents keep the old text); a change
request is never approved by its author (same token, or another token of the same SSO user), is
invisible to agents until published, and publishing moves production for agents (their open
stream hears it). Breaking changes block publication until a reviewer overrides them with a
reason; an admin's emergency override needs a reason and is marked in the change log; a stale
request is refused; concurrent publications publish once.
"""

from __future__ import annotations

import json
import queue
import re
import secrets
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, NamedTuple

import httpx
import pytest
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from registry.catalog.values import WriteOptions
from registry.db.engine import Database, DatabaseUnavailable
from registry.db.models import ChangeRequestReview
from registry.runtime import Registry
from tests.conftest import _drop_postgres_schema, _fresh_postgres_schema, require_postgres
from tests.http import TLS
from tests.interop.mcp_wire import SseEvent, StreamableHttpClient, iter_sse, open_session, served_prompt_text
from tests.oidc_issuer import TestIssuer
from tests.serve_process import ServerProcess, issue_token

AUDIENCE = "mcp-registry"


class Setup:
    """The server and one token per person."""

    def __init__(self, server: ServerProcess, issuer: TestIssuer) -> None:
        self.server = server
        self.issuer = issuer
        with server.admin() as admin:
            # A reviewer too, so that refusing their own approvals is the author rule, not a missing role.
            self.editor_a = issue_token(admin, "editor-a", ["reviewer"])["token"]
            self.editor_only = issue_token(admin, "editor-only", ["editor"])["token"]
            self.reviewer_b = issue_token(admin, "reviewer-b", ["reviewer"])["token"]
            self.reviewer_c = issue_token(admin, "reviewer-c", ["reviewer"])["token"]
            self.agent = issue_token(admin, "agent", ["agent"])["token"]

    def http(self, token: str) -> httpx.Client:
        return self.server.client(token)

    def admin(self) -> httpx.Client:
        return self.server.admin()

    def mcp(self) -> StreamableHttpClient:
        return open_session(self.server.url, self.agent)

    def served_text(self, name: str, arguments: dict[str, str]) -> str:
        return served_prompt_text(self.server.url, name, arguments, self.agent)


@pytest.fixture(scope="module")
def issuer() -> Iterator[TestIssuer]:
    with TestIssuer(audience=AUDIENCE) as running:
        yield running


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def setup(
    request: pytest.FixtureRequest,
    issuer: TestIssuer,
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server_url: str | None,
) -> Iterator[Setup]:
    folder = tmp_path_factory.mktemp(f"reviews-{request.param}")
    database_url, schema = None, None
    if request.param == "postgresql":
        server_url = require_postgres(postgres_server_url)
        database_url, schema = _fresh_postgres_schema(server_url)
    env = {
        "REGISTRY_PROTECTED_LABELS": "production",
        "REGISTRY_OIDC_ISSUER": issuer.url,
        "REGISTRY_OIDC_AUDIENCE": AUDIENCE,
        "REGISTRY_OIDC_JWKS_MIN_REFRESH_S": "0",
    }
    try:
        with ServerProcess(folder / "data", database_url=database_url, env=env, name=f"reviews-{request.param}") as srv:
            yield Setup(srv, issuer)
    finally:
        if schema is not None and postgres_server_url is not None:
            _drop_postgres_schema(postgres_server_url, schema)


def fresh(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


GREETING = {
    "title": "Greeting",
    "description": "Greets someone",
    "arguments": [{"name": "who", "required": True}],
    "samples": [{"who": "Ada"}],
}


def published_prompt(s: Setup, template: str, **spec: Any) -> str:
    """A new prompt whose v1 production serves (put there by an admin's override: the setup)."""
    name = fresh("greet")
    with s.admin() as admin:
        created = ok(admin.post("/api/v1/prompts", json={"name": name, **GREETING, **spec, "template": template}), 201)
        assert created["held_labels"] == ["production"] and "production" not in created["labels"]
        ok(admin.put(f"/api/v1/prompts/{name}/labels/production", json={"version": 1, "override_reason": "setup"}))
    return name


def open_review(s: Setup, name: str, body: dict[str, Any], token: str | None = None) -> int:
    """Editor A saves ``body`` asking for review; the id of the request it opened."""
    with s.http(token or s.editor_a) as a:
        saved = ok(
            a.put(
                f"/api/v1/prompts/{name}",
                json={**body, "request_review": True, "change_request": {"title": f"update {name}"}},
            )
        )
    assert saved["held_labels"] == ["production"], saved
    assert len(saved["change_requests"]) == 1, saved
    request_id: int = saved["change_requests"][0]
    return request_id


class GetStream:
    """An agent's MCP GET stream, held open in a thread (its events queued)."""

    def __init__(self, s: Setup, client: StreamableHttpClient) -> None:
        self.events: queue.Queue[SseEvent] = queue.Queue()
        headers = {**client.headers(), "Accept": "text/event-stream"}
        headers.pop("Content-Type", None)
        self._http = httpx.Client(base_url=s.server.url, timeout=httpx.Timeout(10, read=60), verify=TLS)
        self._opened = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(headers,), daemon=True)
        self._thread.start()
        assert self._opened.wait(10), "the GET stream did not open"

    def _run(self, headers: dict[str, str]) -> None:
        try:
            with self._http.stream("GET", "/mcp", headers=headers) as response:
                assert response.status_code == 200
                self._opened.set()
                for event in iter_sse(response.iter_lines()):
                    self.events.put(event)
        except (httpx.HTTPError, RuntimeError, AssertionError):
            self._opened.set()

    def methods(self, wait: float) -> list[str]:
        found = []
        try:
            while True:
                event = self.events.get(timeout=wait)
                if event.data:
                    found.append(json.loads(event.data).get("method", ""))
                wait = 0.5
        except queue.Empty:
            return found

    def close(self) -> None:
        self._http.close()


# ------------------------------------------------------------------ the review flow


def test_a_save_holds_production_and_a_reviewed_request_publishes_it(setup: Setup) -> None:
    s = setup
    name = published_prompt(s, "Hello {{ who }}")
    assert s.served_text(name, {"who": "Ada"}) == "Hello Ada"
    agent = s.mcp()
    stream = GetStream(s, agent)
    try:
        # A save (text and description changed) leaves production alone and opens a request.
        request_id = open_review(s, name, {**GREETING, "description": "Greets warmly", "template": "Hi {{ who }}!"})
        with s.admin() as admin:
            entry = ok(admin.get(f"/api/v1/prompts/{name}"))
        assert entry["labels"] == {"latest": 2, "production": 1}
        assert s.served_text(name, {"who": "Ada"}) == "Hello Ada"

        # Agents see nothing of it: the admin API is closed to them, MCP serves v1.
        with s.http(s.agent) as agent_api:
            assert agent_api.get("/api/v1/change-requests").status_code == 403
            assert agent_api.get(f"/api/v1/change-requests/{request_id}").status_code == 403

        with s.http(s.editor_a) as a:
            detail = ok(a.get(f"/api/v1/change-requests/{request_id}"))
            assert detail["state"] == "in_review" and detail["authored_by_you"] is True
            assert (detail["from_version"], detail["to_version"], detail["label"]) == (1, 2, "production")
            assert detail["title"] == f"update {name}"
            assert "Hi {{ who }}!" in detail["diff"]["diff"]
            assert detail["checks"]["failed"] is False
            # The author cannot approve, with the token that opened it.
            refused = a.post(f"/api/v1/change-requests/{request_id}/approve", json={"comment": "lgtm"})
            assert refused.status_code == 403, refused.text
            assert "author" in refused.json()["detail"]
            # Nor publish it unapproved.
            assert a.post(f"/api/v1/change-requests/{request_id}/publish").status_code == 409

        with s.http(s.reviewer_b) as b:
            approved = ok(b.post(f"/api/v1/change-requests/{request_id}/approve", json={"comment": "nice"}))
        assert approved["state"] == "approved" and approved["approvals"] == 1 and approved["publishable"]
        assert s.served_text(name, {"who": "Ada"}) == "Hello Ada", "approval alone publishes nothing"

        with s.http(s.editor_a) as a:
            published = ok(a.post(f"/api/v1/change-requests/{request_id}/publish"))
        assert published["state"] == "published" and published["published_by"] == "editor-a"
        assert s.served_text(name, {"who": "Ada"}) == "Hi Ada!"
        assert "notifications/prompts/list_changed" in stream.methods(wait=10)
    finally:
        stream.close()
        agent.http.close()

    with s.admin() as admin:
        changes = ok(admin.get("/api/v1/changes", params={"after": 0, "limit": 1000}))["items"]
        moved = [c for c in changes if c["name"] == name and c["action"] == "label_moved" and c["version"] == 2]
        assert len(moved) == 1 and f"change request #{request_id}" in moved[0]["note"]
        assert moved[0]["override"] is False
        # The request's own transitions are in the audit trail, never in the agents' feed.
        assert all(c["kind"] in ("prompt", "resource", "tool") for c in changes)
        listed = ok(admin.get("/api/v1/change-requests", params={"name": name}))
        assert [i["id"] for i in listed["items"]] == [request_id] and listed["items"][0]["state"] == "published"


def test_the_same_sso_user_cannot_approve_with_another_token(setup: Setup) -> None:
    s = setup
    name = published_prompt(s, "Hello {{ who }}")
    sub = "user-" + secrets.token_hex(4)
    first = s.issuer.mint(sub=sub, email=f"{sub}@example.test", registry_role="reviewer", jti="a")
    second = s.issuer.mint(sub=sub, email=f"{sub}@example.test", registry_role="reviewer", jti="b")
    assert first != second
    request_id = open_review(s, name, {**GREETING, "template": "Hey {{ who }}"}, token=first)
    with s.http(second) as same_person:
        refused = same_person.post(f"/api/v1/change-requests/{request_id}/approve", json={})
    assert refused.status_code == 403, refused.text
    assert "author" in refused.json()["detail"]
    other = s.issuer.mint(sub=sub + "-other", registry_role="reviewer")
    with s.http(other) as someone_else:
        ok(someone_else.post(f"/api/v1/change-requests/{request_id}/approve", json={}))


def test_breaking_changes_block_publication_until_a_reviewer_overrides(setup: Setup) -> None:
    s = setup
    name = published_prompt(s, "Hello {{ who }}", arguments=[{"name": "who", "required": True, "enum": ["Ada", "Bob"]}])
    # A required argument added and the allowed values narrowed.
    request_id = open_review(
        s,
        name,
        {
            **GREETING,
            "arguments": [{"name": "who", "required": True, "enum": ["Ada"]}, {"name": "tone", "required": True}],
            "samples": [{"who": "Ada", "tone": "warm"}],
            "template": "Hello {{ who }}, {{ tone }}",
        },
    )
    with s.http(s.reviewer_b) as b:
        detail = ok(b.get(f"/api/v1/change-requests/{request_id}"))
        assert detail["checks"]["failed"] is True
        breaking = next(i for i in detail["checks"]["items"] if i["status"] == "fail")
        assert "required argument 'tone' was added" in breaking["detail"]
        assert "no longer accepts: Bob" in breaking["detail"]
        ok(b.post(f"/api/v1/change-requests/{request_id}/approve", json={"comment": "fine by me"}))
    with s.http(s.editor_a) as a:
        blocked = a.post(f"/api/v1/change-requests/{request_id}/publish")
    assert blocked.status_code == 409, blocked.text
    assert "checks fail" in blocked.json()["detail"]
    with s.http(s.reviewer_b) as b:
        unexplained = b.post(f"/api/v1/change-requests/{request_id}/approve", json={"override_checks": True})
        assert unexplained.status_code == 422, unexplained.text
        assert "reason" in unexplained.json()["detail"]
        overridden = ok(
            b.post(
                f"/api/v1/change-requests/{request_id}/approve",
                json={"override_checks": True, "comment": "every agent sends a tone already"},
            )
        )
    assert overridden["checks_overridden"] and overridden["publishable"]
    assert overridden["approvals"] == 1, "one verdict per reviewer counts"
    with s.http(s.editor_a) as a:
        ok(a.post(f"/api/v1/change-requests/{request_id}/publish"))
    assert s.served_text(name, {"who": "Ada", "tone": "warm"}) == "Hello Ada, warm"


def test_a_tightened_tool_schema_is_flagged(setup: Setup) -> None:
    s = setup
    name = fresh("tool")
    schema = {"type": "object", "properties": {"message": {"type": "string"}}}
    tool = {"name": name, "inputSchema": schema, "webhook": {"url": "builtin://echo"}}
    with s.admin() as admin:
        ok(admin.post("/api/v1/tools", json=tool), 201)
        ok(admin.put(f"/api/v1/tools/{name}/labels/production", json={"version": 1, "override_reason": "setup"}))
    tighter = {**schema, "required": ["message"], "additionalProperties": False}
    with s.http(s.editor_a) as a:
        saved = ok(a.put(f"/api/v1/tools/{name}", json={**tool, "inputSchema": tighter, "request_review": True}))
        assert saved["held_labels"] == ["production"]
        checks = ok(a.get(f"/api/v1/tools/{name}/checks"))
        assert checks["failed"] is True
        detail = next(i for i in checks["items"] if i["status"] == "fail")["detail"]
        assert "property 'message' is now required" in detail and "additionalProperties is now false" in detail
        # The version production serves checks clean against itself.
        assert ok(a.get(f"/api/v1/tools/{name}/checks", params={"version": 1}))["failed"] is False
        request = ok(a.get(f"/api/v1/change-requests/{saved['change_requests'][0]}"))
    assert request["checks"]["failed"] is True
    with s.http(s.reviewer_b) as b:
        ok(b.post(f"/api/v1/change-requests/{request['id']}/approve", json={}))
    with s.http(s.editor_a) as a:
        assert a.post(f"/api/v1/change-requests/{request['id']}/publish").status_code == 409


def test_an_emergency_override_needs_an_admin_and_a_reason_and_is_marked(setup: Setup) -> None:
    s = setup
    name = published_prompt(s, "Hello {{ who }}")
    request_id = open_review(s, name, {**GREETING, "template": "Urgent {{ who }}"})
    with s.http(s.editor_a) as a:
        assert a.post(f"/api/v1/change-requests/{request_id}/publish", json={"override_reason": ""}).status_code == 422
        refused = a.post(f"/api/v1/change-requests/{request_id}/publish", json={"override_reason": "hurry"})
        assert refused.status_code == 403, refused.text
        # Moving production directly is refused too: a change request moves it.
        direct = a.put(f"/api/v1/prompts/{name}/labels/production", json={"version": 2})
        assert direct.status_code == 403 and "change request" in direct.json()["detail"]
        assert (
            a.put(f"/api/v1/prompts/{name}/labels/production", json={"version": 2, "override_reason": "me"}).status_code
            == 403
        )
        assert a.delete(f"/api/v1/prompts/{name}/labels/production").status_code == 403
    with s.admin() as admin:
        published = ok(
            admin.post(f"/api/v1/change-requests/{request_id}/publish", json={"override_reason": "incident 42"})
        )
        assert published["state"] == "published"
        changes = ok(admin.get("/api/v1/changes", params={"after": 0, "limit": 1000}))["items"]
    row = next(c for c in changes if c["name"] == name and c["action"] == "label_moved" and c["version"] == 2)
    assert row["override"] is True and row["reason"] == "incident 42"
    assert f"change request #{request_id}" in row["note"]
    assert s.served_text(name, {"who": "Ada"}) == "Urgent Ada"


def test_a_stale_request_is_refused(setup: Setup) -> None:
    s = setup
    name = published_prompt(s, "Hello {{ who }}")
    first = open_review(s, name, {**GREETING, "template": "One {{ who }}"})
    second = open_review(s, name, {**GREETING, "template": "Two {{ who }}"})
    with s.http(s.reviewer_b) as b:
        for request_id in (first, second):
            ok(b.post(f"/api/v1/change-requests/{request_id}/approve", json={}))
    with s.http(s.editor_a) as a:
        ok(a.post(f"/api/v1/change-requests/{first}/publish"))
        stale = a.post(f"/api/v1/change-requests/{second}/publish")
        assert stale.status_code == 409, stale.text
        assert "production moved since this request was opened" in stale.json()["detail"]
        assert ok(a.get(f"/api/v1/change-requests/{second}"))["stale"] is True
        ok(a.post(f"/api/v1/change-requests/{second}/withdraw"))
    assert s.served_text(name, {"who": "Ada"}) == "One Ada"


def test_concurrent_publications_publish_once(setup: Setup) -> None:
    s = setup
    name = published_prompt(s, "Hello {{ who }}")
    request_id = open_review(s, name, {**GREETING, "template": "Once {{ who }}"})
    with s.http(s.reviewer_b) as b:
        ok(b.post(f"/api/v1/change-requests/{request_id}/approve", json={}))

    def publish(token: str) -> tuple[int, str | None]:
        with s.http(token) as http:
            answer = http.post(f"/api/v1/change-requests/{request_id}/publish")
        assert answer.status_code == 200, answer.text
        return answer.status_code, answer.json()["notice"]

    with ThreadPoolExecutor(max_workers=3) as pool:
        answers = list(pool.map(publish, [s.editor_a, s.reviewer_b, s.reviewer_c]))
    # One publishes; the others are told it already was (their wish holds: no error to retry).
    notices = [notice for _status, notice in answers]
    assert notices.count(None) == 1, answers
    assert all("already published" in n for n in notices if n is not None), answers
    with s.admin() as admin:
        changes = ok(admin.get("/api/v1/changes", params={"after": 0, "limit": 1000}))["items"]
    assert len([c for c in changes if c["name"] == name and c["action"] == "label_moved" and c["version"] == 2]) == 1


def test_requests_opened_directly_and_their_rules(setup: Setup) -> None:
    s = setup
    name = published_prompt(s, "Hello {{ who }}")
    with s.http(s.editor_a) as a:
        saved = ok(a.put(f"/api/v1/prompts/{name}", json={**GREETING, "template": "Later {{ who }}"}))
        assert saved["held_labels"] == ["production"] and saved["change_requests"] == []
        assert (
            a.post("/api/v1/change-requests", json={"kind": "prompt", "name": name, "label": "staging"}).status_code
            == 409
        )
        draft = ok(a.post("/api/v1/change-requests", json={"kind": "prompt", "name": name, "draft": True}), 201)
        assert draft["state"] == "draft" and draft["to_version"] == 2
        again = a.post("/api/v1/change-requests", json={"kind": "prompt", "name": name})
        assert again.status_code == 409 and f"#{draft['id']}" in again.json()["detail"]
        assert a.post("/api/v1/change-requests", json={"kind": "prompt", "name": "no-such-prompt"}).status_code == 404
    with s.http(s.reviewer_b) as b:
        assert b.post(f"/api/v1/change-requests/{draft['id']}/approve", json={}).status_code == 409  # a draft
        assert b.post(f"/api/v1/change-requests/{draft['id']}/submit").status_code == 403  # not its author
    with s.http(s.editor_a) as a:
        assert ok(a.post(f"/api/v1/change-requests/{draft['id']}/submit"))["state"] == "in_review"
    with s.http(s.editor_only) as editor:
        refused = editor.post(f"/api/v1/change-requests/{draft['id']}/approve", json={})
        assert refused.status_code == 403 and "reviewer role" in refused.json()["detail"]
    with s.http(s.reviewer_b) as b:
        assert b.post(f"/api/v1/change-requests/{draft['id']}/reject", json={}).status_code == 422  # say why
        rejected = ok(b.post(f"/api/v1/change-requests/{draft['id']}/reject", json={"comment": "not yet"}))
        assert rejected["state"] == "rejected"
    with s.http(s.reviewer_c) as c:
        assert ok(c.post(f"/api/v1/change-requests/{draft['id']}/approve", json={}))["state"] == "rejected"
    with s.http(s.reviewer_b) as b:
        # B changes their verdict: their rejection no longer stands.
        assert ok(b.post(f"/api/v1/change-requests/{draft['id']}/approve", json={}))["state"] == "approved"
        assert b.post(f"/api/v1/change-requests/{draft['id']}/withdraw").status_code == 403
        listed = ok(b.get("/api/v1/change-requests", params={"state": "approved", "name": name}))
        assert [i["id"] for i in listed["items"]] == [draft["id"]] and listed["items"][0]["approvals"] == 2
    with s.http(s.editor_a) as a:
        assert ok(a.post(f"/api/v1/change-requests/{draft['id']}/withdraw"))["state"] == "withdrawn"
        assert a.post(f"/api/v1/change-requests/{draft['id']}/publish").status_code == 409


def test_protected_labels_api(setup: Setup) -> None:
    s = setup
    with s.admin() as admin:
        listed = ok(admin.get("/api/v1/protected-labels"))["items"]
        assert {"name": "production", "approvals": 1, "source": "environment"}.items() <= listed[0].items()
        label = "stage-" + secrets.token_hex(3)
        protected = ok(admin.put(f"/api/v1/protected-labels/{label}", json={"approvals": 2}))
        assert (protected["source"], protected["approvals"]) == ("api", 2)
        assert admin.put("/api/v1/protected-labels/latest", json={}).status_code == 422
        kept = admin.delete("/api/v1/protected-labels/production")
        assert kept.status_code == 409 and "REGISTRY_PROTECTED_LABELS" in kept.json()["detail"]
    with s.http(s.editor_a) as a:
        assert a.put(f"/api/v1/protected-labels/{label}", json={}).status_code == 403
        assert a.delete(f"/api/v1/protected-labels/{label}").status_code == 403
        # A save to the newly protected label holds it; its request needs two approvals.
        name = fresh("staged")
        created = ok(
            a.post(
                "/api/v1/prompts",
                json={"name": name, **GREETING, "template": "Hi {{ who }}", "labels": [label], "request_review": True},
            ),
            201,
        )
        assert created["held_labels"] == [label] and created["labels"] == {"latest": 1}
        request = ok(a.get(f"/api/v1/change-requests/{created['change_requests'][0]}"))
        assert request["approvals_required"] == 2 and request["from_version"] is None and request["diff"] is None
    with s.admin() as admin:
        assert admin.delete(f"/api/v1/protected-labels/{label}").status_code == 204
        assert admin.delete(f"/api/v1/protected-labels/{label}").status_code == 404
        events = ok(admin.get("/api/v1/protected-labels"))["items"]
        assert [i["name"] for i in events] == ["production"]
    with s.http(s.editor_a) as a:
        # Unprotected again: a label move needs no request.
        ok(a.put(f"/api/v1/prompts/{name}/labels/{label}", json={"version": 1}))


class TeamReview(NamedTuple):
    """A team's prompt with an edit in review: the team, its reviewer's and author's tokens."""

    team: str
    member: str
    author: str
    name: str
    request_id: int


def team_edit_in_review(s: Setup, prefix: str, *, author_role: str) -> TeamReview:
    """A new team with a reviewer and an author in ``author_role`` (both with the viewer scope
    only, so nothing outside the team counts for them), a prompt of the team ("Hi") and the
    author's edit of it ("Yo") saved for review."""
    team = prefix + secrets.token_hex(3)
    with s.admin() as admin:
        ok(admin.post("/api/v1/teams", json={"name": team, "title": f"Team {team}"}), 201)
        tokens = [
            ok(
                admin.post(
                    "/api/v1/tokens", json={"name": f"{team}-{role}", "scopes": ["viewer"], "teams": {team: role}}
                ),
                201,
            )["token"]
            for role in ("reviewer", author_role)
        ]
        name = fresh(f"{team}-prompt")
        body = {"name": name, **GREETING, "template": "Hi {{ who }}", "team": team}
        ok(admin.post("/api/v1/prompts", json=body), 201)
    with s.http(tokens[1]) as a:
        saved = ok(
            a.put(f"/api/v1/prompts/{name}", json={**GREETING, "template": "Yo {{ who }}", "request_review": True})
        )
    return TeamReview(team, tokens[0], tokens[1], name, saved["change_requests"][0])


def test_a_teams_requests_are_seen_and_reviewed_by_its_members_only(setup: Setup) -> None:
    s = setup
    team, member, author, name, request_id = team_edit_in_review(s, "t", author_role="editor")
    # Someone outside the team: as if it did not exist.
    with s.http(s.reviewer_b) as outsider:
        assert outsider.get(f"/api/v1/change-requests/{request_id}").status_code == 404
        assert outsider.post(f"/api/v1/change-requests/{request_id}/approve", json={}).status_code == 404
        listed = ok(outsider.get("/api/v1/change-requests", params={"name": name}))
        assert listed["items"] == [] and listed["total"] == 0
    # A reviewer of the team (with only the viewer scope) approves; the author (its editor) publishes.
    with s.http(member) as m:
        assert ok(m.get("/api/v1/change-requests", params={"team": team}))["total"] == 1
        ok(m.post(f"/api/v1/change-requests/{request_id}/approve", json={}))
    with s.http(author) as a:
        ok(a.post(f"/api/v1/change-requests/{request_id}/publish"))


def test_a_longest_name_is_reviewed_too(setup: Setup) -> None:
    """The change log's name column holds 128 characters; a request's events name the entry's
    kind and name, so they are cut there (the note keeps them whole)."""
    s = setup
    name = fresh("x" * 119)
    assert len(name) == 128
    with s.http(s.editor_a) as a:
        created = ok(
            a.post(
                "/api/v1/prompts", json={"name": name, **GREETING, "template": "Hi {{ who }}", "request_review": True}
            ),
            201,
        )
    request_id = created["change_requests"][0]
    with s.http(s.reviewer_b) as b:
        ok(b.post(f"/api/v1/change-requests/{request_id}/approve", json={}))
    with s.http(s.editor_a) as a:
        ok(a.post(f"/api/v1/change-requests/{request_id}/publish"))
    assert s.served_text(name, {"who": "Ada"}) == "Hi Ada"


# ------------------------------------------------------------------ idempotent reviews and publication


def _request_events(s: Setup, request_id: int, action: str) -> list[dict[str, Any]]:
    """The audit trail's ``action`` events of one change request."""
    with s.admin() as admin:
        items = ok(admin.get("/api/v1/audit", params={"kind": "change_request", "action": action, "limit": 500}))
    return [row for row in items["items"] if f"change request #{request_id} " in (row.get("note") or "")]


def test_approving_twice_records_one_approval(setup: Setup) -> None:
    """A second click on Approve (or a retry whose first answer was lost) is a success that says
    it was already approved, and adds no review and no change-log event."""
    s = setup
    name = published_prompt(s, "Hello {{ who }}")
    request_id = open_review(s, name, {**GREETING, "template": "Twice {{ who }}"})
    with s.http(s.reviewer_b) as b:
        first = ok(b.post(f"/api/v1/change-requests/{request_id}/approve", json={"comment": "lgtm"}))
        second = ok(b.post(f"/api/v1/change-requests/{request_id}/approve", json={"comment": "lgtm"}))
    assert first["notice"] is None and first["state"] == "approved"
    assert second["notice"] == f"you already approved change request #{request_id}; nothing changed"
    assert second["state"] == "approved" and second["approvals"] == 1
    assert [r["reviewer"] for r in second["reviews"]] == ["reviewer-b"]
    assert len(_request_events(s, request_id, "cr_approved")) == 1
    # After publication, a late retry of the approval still says so (not a 409 about the state).
    with s.http(s.editor_a) as a:
        ok(a.post(f"/api/v1/change-requests/{request_id}/publish"))
    with s.http(s.reviewer_b) as b:
        late = ok(b.post(f"/api/v1/change-requests/{request_id}/approve", json={}))
    assert late["notice"] is not None and "already approved" in late["notice"] and late["state"] == "published"
    assert len(_request_events(s, request_id, "cr_approved")) == 1


@contextmanager
def _ui(s: Setup, token: str) -> Iterator[httpx.Client]:
    """A browser-like client of the web UI, signed in with ``token`` (redirects followed)."""
    with httpx.Client(base_url=s.server.url, timeout=30, follow_redirects=True, verify=TLS) as browser:
        form = browser.get("/ui/signin")
        nonce = re.search(r'name="signin_nonce" value="([^"]+)"', form.text)
        assert nonce
        signed = browser.post("/ui/signin", data={"token": token, "signin_nonce": nonce.group(1), "next": "/ui/"})
        assert signed.status_code == 200, signed.text[:500]
        yield browser


def test_clicking_approve_twice_in_the_web_ui_says_it_was_already_approved(setup: Setup) -> None:
    s = setup
    name = published_prompt(s, "Hello {{ who }}")
    request_id = open_review(s, name, {**GREETING, "template": "Clicked {{ who }}"})
    with _ui(s, s.reviewer_c) as browser:
        page = browser.get(f"/ui/reviews/{request_id}")
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert csrf
        first = browser.post(f"/ui/reviews/{request_id}/approve", data={"csrf_token": csrf.group(1)})
        second = browser.post(f"/ui/reviews/{request_id}/approve", data={"csrf_token": csrf.group(1)})
    assert first.status_code == 200 and ">Approved.<" in first.text
    assert second.status_code == 200, second.text[:500]
    assert f"You already approved change request #{request_id}; nothing changed." in second.text
    with s.http(s.reviewer_c) as c:
        detail = ok(c.get(f"/api/v1/change-requests/{request_id}"))
    assert [r["reviewer"] for r in detail["reviews"]] == ["reviewer-c"]
    assert len(_request_events(s, request_id, "cr_approved")) == 1


def test_two_approvals_racing_from_one_reviewer_record_one(setup: Setup) -> None:
    """Four approvals of one reviewer at once (a double click over a slow link, replicas): all
    succeed, one review row, one event."""
    s = setup
    name = published_prompt(s, "Hello {{ who }}")
    request_id = open_review(s, name, {**GREETING, "template": "Race {{ who }}"})
    start = threading.Barrier(4)

    def approve(_n: int) -> dict[str, Any]:
        with s.http(s.reviewer_b) as b:
            start.wait(timeout=30)
            return ok(b.post(f"/api/v1/change-requests/{request_id}/approve", json={}))

    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(approve, range(4)))
    with s.http(s.reviewer_b) as b:
        detail = ok(b.get(f"/api/v1/change-requests/{request_id}"))
    assert len(detail["reviews"]) == 1 and detail["approvals"] == 1
    assert len(_request_events(s, request_id, "cr_approved")) == 1
    assert [a.get("notice") is None for a in answers].count(True) == 1, answers


def test_a_retried_publish_says_already_published(setup: Setup) -> None:
    s = setup
    name = published_prompt(s, "Hello {{ who }}")
    request_id = open_review(s, name, {**GREETING, "template": "Retry {{ who }}"})
    with s.http(s.reviewer_b) as b:
        ok(b.post(f"/api/v1/change-requests/{request_id}/approve", json={}))
    with s.http(s.editor_a) as a:
        first = ok(a.post(f"/api/v1/change-requests/{request_id}/publish"))
        again = ok(a.post(f"/api/v1/change-requests/{request_id}/publish"))
    assert first["notice"] is None and first["state"] == "published"
    assert again["state"] == "published" and again["notice"] is not None
    assert again["notice"].startswith(f"change request #{request_id} was already published (by editor-a at ")
    assert len(_request_events(s, request_id, "cr_published")) == 1
    with s.admin() as admin:
        changes = ok(admin.get("/api/v1/changes", params={"after": 0, "limit": 1000}))["items"]
    assert len([c for c in changes if c["name"] == name and c["action"] == "label_moved" and c["version"] == 2]) == 1


def test_asking_again_for_an_open_request_names_and_links_it(setup: Setup) -> None:
    """Pointing production at a version an open request already asks for: the API's problem names
    and links the request; the web UI's page links it."""
    s = setup
    name = published_prompt(s, "Hello {{ who }}")
    request_id = open_review(s, name, {**GREETING, "template": "Open {{ who }}"})
    with s.http(s.editor_a) as a:
        again = a.post("/api/v1/change-requests", json={"kind": "prompt", "name": name, "to_version": 2})
    assert again.status_code == 409, again.text
    problem = again.json()
    assert problem["change_request_id"] == request_id
    assert problem["change_request"] == f"/api/v1/change-requests/{request_id}"
    assert f"change request #{request_id} already asks" in problem["detail"]
    with _ui(s, s.editor_a) as browser:
        confirm = browser.get(f"/ui/prompts/{name}/promote", params={"version": 2, "label": "production"})
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', confirm.text)
        assert csrf, confirm.text[:500]
        page = browser.post(
            "/ui/reviews/open",
            data={"csrf_token": csrf.group(1), "kind": "prompt", "name": name, "label": "production", "version": "2"},
        )
    assert page.status_code == 409, page.text[:500]
    assert f'<a href="/ui/reviews/{request_id}">Go to change request #{request_id}</a>' in page.text


# ------------------------------------------------------------------ in-process: the database's part


def _opened_request(registry: Registry) -> int:
    """A prompt whose production is protected, and a change request (by alice) to move it to v2."""
    registry.protection.protect("production", None, actor="admin")
    name = fresh("inproc")
    spec = {"name": name, **GREETING, "template": "Hello {{ who }}"}
    registry.catalog.create("prompt", spec, WriteOptions(actor="alice"))
    registry.catalog.update("prompt", name, {**spec, "template": "Hi {{ who }}"}, WriteOptions(actor="alice"))
    opened = registry.reviews.open("prompt", name, actor="alice", to_version=2)
    request_id: int = opened["id"]
    return request_id


def test_the_database_refuses_a_second_review_after_the_same_one(registry: Registry) -> None:
    """What keeps two replicas from doubling an approval when neither sees the other's row yet:
    (request, reviewer, previous review) is unique."""
    request_id = _opened_request(registry)
    registry.reviews.approve(request_id, actor="bob")
    with pytest.raises(IntegrityError), registry.db.session() as session:
        session.add(
            ChangeRequestReview(
                request_id=request_id, verdict="approve", reviewer="bob", reviewer_key="name:bob", after_review_id=0
            )
        )
        session.flush()


class _DownAfterCommit:
    """Wraps ``Database.session``: once a transaction that wrote has committed, every later
    session finds the database unavailable (a PostgreSQL restart just after the commit)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.inner = db.session
        self.down = False

    @contextmanager
    def session(self) -> Iterator[Session]:
        if self.down:
            raise DatabaseUnavailable("the database restarted")
        wrote: list[bool] = []
        with self.inner() as session:
            event.listen(session, "after_flush", lambda *_a: wrote.append(True))
            event.listen(session, "do_orm_execute", lambda state: wrote.append(state.is_update or state.is_insert))
            yield session
        if any(wrote):
            self.down = True


def test_an_approval_and_a_publication_answer_from_what_they_committed(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database goes away just after the approval's commit, and again after the publication's:
    each answers what it did (not a 503 for a call that in fact committed); retried, each says it
    was already done, and the approval is recorded once."""
    request_id = _opened_request(registry)
    outage = _DownAfterCommit(registry.db)
    monkeypatch.setattr(registry.db, "session", outage.session)
    approved = registry.reviews.approve(request_id, actor="bob")
    assert outage.down, "the approval wrote"
    assert approved["state"] == "approved" and approved["approvals"] == 1 and approved["notice"] is None
    assert [r["reviewer"] for r in approved["reviews"]] == ["bob"]
    outage.down = False
    again = registry.reviews.approve(request_id, actor="bob")
    assert again["notice"] == f"you already approved change request #{request_id}; nothing changed"
    assert len(again["reviews"]) == 1

    published = registry.reviews.publish(request_id, actor="carol")
    assert outage.down, "the publication wrote"
    assert published["state"] == "published" and published["published_by"] == "carol"
    assert published["current_version"] == 2 and published["notice"] is None
    outage.down = False
    retried = registry.reviews.publish(request_id, actor="carol")
    assert retried["state"] == "published" and retried["notice"] is not None
    assert "already published (by carol" in retried["notice"]


# ------------------------------------------------------------------ publish when approved, waiting for a reviewer


def test_publish_when_approved_publishes_in_the_approving_review(setup: Setup) -> None:
    """The author chooses "publish when approved" when opening the request: the approval that
    brings the approvals needed publishes it (agents are served it, no separate publish), and the
    audit trail says it was automatic and on whose approval."""
    s = setup
    name = published_prompt(s, "Hello {{ who }}")
    with s.http(s.editor_a) as a:
        ok(a.put(f"/api/v1/prompts/{name}", json={**GREETING, "template": "Auto {{ who }}", "change_note": "auto"}))
        refused = a.post("/api/v1/change-requests", json={"kind": "prompt", "name": name, "publish_when_approved": 1})
        assert refused.status_code == 422, refused.text  # true or false only
        opened = ok(
            a.post(
                "/api/v1/change-requests",
                json={"kind": "prompt", "name": name, "title": "Automatic", "publish_when_approved": True},
            ),
            201,
        )
        assert opened["publish_when_approved"] is True and opened["state"] == "in_review"
        assert opened["proposed"]["change_note"] == "auto" and opened["proposed"]["author"] == "editor-a"
        listed = ok(a.get("/api/v1/change-requests", params={"name": name}))["items"]
        assert [(i["id"], i["publish_when_approved"]) for i in listed] == [(opened["id"], True)]
    assert s.served_text(name, {"who": "Ada"}) == "Hello Ada"
    with s.http(s.reviewer_b) as b:
        approved = ok(b.post(f"/api/v1/change-requests/{opened['id']}/approve", json={"comment": "ship it"}))
    assert approved["state"] == "published" and approved["published_by"] == "reviewer-b"
    assert approved["your_verdict"] == "approve" and approved["auto_publish_refused"] is None
    assert s.served_text(name, {"who": "Ada"}) == "Auto Ada"
    [event] = _request_events(s, opened["id"], "cr_published")
    assert "published automatically on the approval of reviewer-b" in event["note"], event
    assert len(_request_events(s, opened["id"], "cr_approved")) == 1
    with s.http(s.editor_a) as a:
        again = ok(a.post(f"/api/v1/change-requests/{opened['id']}/publish"))
        assert again["notice"] and "already published" in again["notice"]
    with s.admin() as admin:
        verified = ok(admin.get("/api/v1/audit/verify"))
    assert verified["intact"] is True and verified["differences"] == [], verified


def test_publish_when_approved_from_a_save_waits_for_the_approvals_needed(setup: Setup) -> None:
    """A save's ``change_request`` takes the flag too; with two approvals needed, the first
    approval publishes nothing and the second does."""
    s = setup
    label = "rel" + secrets.token_hex(3)
    name = published_prompt(s, "Hello {{ who }}")
    with s.admin() as admin:
        ok(admin.put(f"/api/v1/protected-labels/{label}", json={"approvals": 2}))
        ok(admin.put(f"/api/v1/prompts/{name}/labels/{label}", json={"version": 1, "override_reason": "setup"}))
    try:
        with s.http(s.editor_a) as a:
            saved = ok(
                a.put(
                    f"/api/v1/prompts/{name}",
                    json={
                        **GREETING,
                        "template": "Twice {{ who }}",
                        "labels": [label],
                        "request_review": True,
                        "change_request": {"title": "two needed", "publish_when_approved": True},
                    },
                )
            )
        assert label in saved["held_labels"], saved
        with s.http(s.editor_a) as a:
            requests = [ok(a.get(f"/api/v1/change-requests/{i}")) for i in saved["change_requests"]]
        mine = next(r for r in requests if r["label"] == label)
        assert mine["publish_when_approved"] is True and mine["approvals_required"] == 2
        with s.http(s.reviewer_b) as b:
            first = ok(b.post(f"/api/v1/change-requests/{mine['id']}/approve", json={}))
        assert first["state"] == "in_review" and first["approvals"] == 1
        with s.http(s.reviewer_c) as c:
            second = ok(c.post(f"/api/v1/change-requests/{mine['id']}/approve", json={}))
        assert second["state"] == "published"
        with s.admin() as admin:
            assert ok(admin.get(f"/api/v1/prompts/{name}"))["labels"][label] == 2
    finally:
        with s.admin() as admin:
            admin.delete(f"/api/v1/prompts/{name}/labels/{label}", params={"override_reason": "cleanup"})
            admin.delete(f"/api/v1/protected-labels/{label}")


def test_publish_when_approved_refused_by_a_check_stays_approved_and_says_why(setup: Setup) -> None:
    s = setup
    name = published_prompt(s, "Hello {{ who }}")
    breaking = {
        **GREETING,
        "arguments": [{"name": "who", "required": True}, {"name": "tone", "required": True}],
        "samples": [{"who": "Ada", "tone": "warm"}],
        "template": "Hello {{ who }}, {{ tone }}",
    }
    with s.http(s.editor_a) as a:
        saved = ok(
            a.put(
                f"/api/v1/prompts/{name}",
                json={**breaking, "request_review": True, "change_request": {"publish_when_approved": True}},
            )
        )
    request_id = saved["change_requests"][0]
    with s.http(s.reviewer_b) as b:
        approved = ok(b.post(f"/api/v1/change-requests/{request_id}/approve", json={}))
    assert approved["state"] == "approved"
    assert "checks fail" in approved["auto_publish_refused"], approved
    assert _request_events(s, request_id, "cr_published") == []
    assert s.served_text(name, {"who": "Ada"}) == "Hello Ada"
    # Another reviewer's approval overriding the checks completes it: published then.
    with s.http(s.reviewer_c) as c:
        overridden = ok(
            c.post(
                f"/api/v1/change-requests/{request_id}/approve",
                json={"override_checks": True, "comment": "every agent sends a tone"},
            )
        )
    assert overridden["state"] == "published" and overridden["auto_publish_refused"] is None
    assert s.served_text(name, {"who": "Ada", "tone": "warm"}) == "Hello Ada, warm"


def test_requests_waiting_for_a_reviewer(setup: Setup) -> None:
    """``?waiting=true``: in review, not yours, of a team you review, no verdict of yours yet."""
    s = setup
    # The author reviews for the team too: their own request does not wait for them.
    review = team_edit_in_review(s, "w", author_role="reviewer")
    member, request_id = review.member, review.request_id
    with s.http(review.author) as a:
        assert ok(a.get("/api/v1/change-requests", params={"waiting": "true"}))["total"] == 0  # their own
    with s.http(member) as m:
        waiting = ok(m.get("/api/v1/change-requests", params={"waiting": "true"}))
        assert [i["id"] for i in waiting["items"]] == [request_id] and waiting["total"] == 1
        ok(m.post(f"/api/v1/change-requests/{request_id}/approve", json={}))
        assert ok(m.get("/api/v1/change-requests", params={"waiting": "true"}))["total"] == 0
    with s.http(s.editor_only) as editor:  # reviews nothing: nothing waits for them
        assert ok(editor.get("/api/v1/change-requests", params={"waiting": "true"}))["total"] == 0
