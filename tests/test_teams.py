"""Teams and who sees what, over the admin API of a real server process, on SQLite and PostgreSQL.

One server per database for the module. Its catalog: a global entry of each kind, one prompt per
team (``alpha``, ``beta``), a beta resource that a global prompt embeds. Its callers: the admin;
an alpha editor (viewer scope, editor in alpha); a beta viewer; a plain viewer with no teams (a
token from before teams); a global editor (editor scope, no teams).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.conftest import _drop_postgres_schema, _fresh_postgres_schema, require_postgres
from tests.factories import prompt_body
from tests.serve_process import ServerProcess, issue_token

PROBLEM = "application/problem+json"
COLLECTIONS = ("prompts", "resources", "tools")


#: The prompts' text: "Hello" is one of the words a member of another team must never see.
HELLO = "Hello {{ who }}"


@dataclass
class World:
    server: ServerProcess
    admin: httpx.Client
    alpha_editor: httpx.Client
    beta_viewer: httpx.Client
    plain_viewer: httpx.Client
    global_editor: httpx.Client


def _ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, postgres_server_url: str | None
) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("teams")
    url, schema = f"sqlite:///{folder / 'registry.db'}", None  # a database named: no demo catalog
    if request.param == "postgresql":
        server_url = require_postgres(postgres_server_url)
        url, schema = _fresh_postgres_schema(server_url)
    clients: list[httpx.Client] = []
    try:
        with ServerProcess(folder / "data", database_url=url, name="teams") as server:
            admin = server.admin()
            clients.append(admin)
            for team in ("alpha", "beta"):
                _ok(admin.post("/api/v1/teams", json={"name": team, "title": f"Team {team}"}), 201)
            _ok(admin.post("/api/v1/prompts", json=prompt_body("g-prompt", HELLO)), 201)
            _ok(admin.post("/api/v1/prompts", json=prompt_body("a-prompt", HELLO, team="alpha")), 201)
            _ok(admin.post("/api/v1/prompts", json=prompt_body("b-prompt", HELLO, team="beta")), 201)
            _ok(admin.put("/api/v1/prompts/b-prompt", json=prompt_body("b-prompt", "v2 {{ who }}")))
            _ok(admin.post("/api/v1/resources", json={"name": "g-doc", "uri": "docs://g", "text": "global"}), 201)
            beta_doc = {"name": "b-doc", "uri": "docs://b", "text": "beta secret", "team": "beta"}
            _ok(admin.post("/api/v1/resources", json=beta_doc), 201)
            embeds = {
                "name": "g-embeds-b",
                "messages": [{"role": "user", "content": {"type": "resource", "uri": "docs://b"}}],
            }
            _ok(admin.post("/api/v1/prompts", json=embeds), 201)
            tool = {"name": "b-tool", "webhook": {"url": "builtin://echo"}, "team": "beta"}
            _ok(admin.post("/api/v1/tools", json=tool), 201)

            def client(name: str, scopes: list[str], teams: dict[str, str] | None = None) -> httpx.Client:
                made = server.client(issue_token(admin, name, scopes, teams=teams or {})["token"])
                clients.append(made)
                return made

            yield World(
                server,
                admin,
                alpha_editor=client("alpha-editor", ["viewer"], {"alpha": "editor"}),
                beta_viewer=client("beta-viewer", ["viewer"], {"beta": "viewer"}),
                plain_viewer=client("plain-viewer", ["viewer"]),
                global_editor=client("global-editor", ["editor"]),
            )
    finally:
        for made in clients:
            made.close()
        if schema is not None:
            assert postgres_server_url is not None
            _drop_postgres_schema(postgres_server_url, schema)


def _names(client: httpx.Client, collection: str = "prompts", **params: Any) -> set[str]:
    page = _ok(client.get(f"/api/v1/{collection}", params={"limit": 500, **params}))
    return {item["name"] for item in page["items"]}


def _same_as_missing(client: httpx.Client, method: str, path: str, name: str, **kwargs: Any) -> None:
    """``path`` (naming ``name``) answers exactly as it does for a name that does not exist."""
    hidden = client.request(method, path, **kwargs)
    missing = client.request(method, path.replace(name, "no-such-entry"), **kwargs)
    assert hidden.status_code == missing.status_code == 404, (path, hidden.text, missing.text)
    assert hidden.headers["content-type"].startswith(PROBLEM)
    assert hidden.json() == {**missing.json(), "detail": missing.json()["detail"].replace("no-such-entry", name)}


def _changes(client: httpx.Client) -> list[dict[str, Any]]:
    return list(_ok(client.get("/api/v1/changes", params={"limit": 1000}))["items"])


# ------------------------------------------------------------------ teams


def test_teams_are_created_listed_retitled_and_deleted_by_admins(world: World) -> None:
    admin = world.admin
    made = _ok(admin.post("/api/v1/teams", json={"name": "gamma"}), 201)
    assert made["name"] == "gamma" and made["entries"] == 0 and made["tokens"] == 0
    duplicate = admin.post("/api/v1/teams", json={"name": "gamma"})
    assert duplicate.status_code == 409 and "already exists" in duplicate.json()["detail"]
    assert admin.post("/api/v1/teams", json={"name": "Not A Team"}).status_code == 422
    assert admin.post("/api/v1/teams", json={"name": "x", "title": "t" * 257}).status_code == 422

    listed = {t["name"]: t for t in _ok(admin.get("/api/v1/teams"))["items"]}
    assert {"alpha", "beta", "gamma"} <= set(listed)
    assert listed["beta"]["entries"] == 3 and listed["beta"]["tokens"] == 1
    assert _ok(admin.patch("/api/v1/teams/gamma", json={"title": "Gamma ray"}))["title"] == "Gamma ray"
    assert _ok(admin.get("/api/v1/teams/gamma"))["title"] == "Gamma ray"

    # Members see their own teams only; only admins manage them.
    assert [t["name"] for t in _ok(world.alpha_editor.get("/api/v1/teams"))["items"]] == ["alpha"]
    assert _ok(world.plain_viewer.get("/api/v1/teams"))["items"] == []
    hidden = world.alpha_editor.get("/api/v1/teams/beta")
    assert hidden.status_code == 404 and hidden.json()["detail"] == "team 'beta' does not exist"
    for method, path, body in (
        ("POST", "/api/v1/teams", {"name": "mine"}),
        ("PATCH", "/api/v1/teams/alpha", {"title": "ours"}),
        ("DELETE", "/api/v1/teams/alpha", None),
    ):
        refused = world.alpha_editor.request(method, path, json=body)
        assert refused.status_code == 403, (method, path, refused.text)

    # A team that owns entries is not deleted; an empty one is, and its memberships go with it.
    busy = admin.delete("/api/v1/teams/beta")
    assert busy.status_code == 409 and "owns 3 entries" in busy.json()["detail"]
    member = _ok(
        admin.post("/api/v1/tokens", json={"name": "g", "scopes": ["viewer"], "teams": {"gamma": "admin"}}), 201
    )
    assert _ok(admin.get("/api/v1/teams/gamma"))["tokens"] == 1
    assert _ok(admin.delete("/api/v1/teams/gamma"))["name"] == "gamma"
    assert admin.get("/api/v1/teams/gamma").status_code == 404
    token = next(t for t in _ok(admin.get("/api/v1/tokens"))["items"] if t["id"] == member["id"])
    assert token["teams"] == {}
    with world.server.client(member["token"]) as former:
        assert _ok(former.get("/api/v1/teams"))["items"] == []


def test_token_teams_must_exist_and_roles_be_known(world: World) -> None:
    unknown = world.admin.post(
        "/api/v1/tokens", json={"name": "x", "scopes": ["viewer"], "teams": {"alpha": "viewer", "nope": "editor"}}
    )
    assert unknown.status_code == 422 and "'nope'" in unknown.json()["detail"], unknown.text
    bad_role = world.admin.post("/api/v1/tokens", json={"name": "x", "scopes": ["viewer"], "teams": {"alpha": "boss"}})
    assert bad_role.status_code == 422
    assert not [t for t in _ok(world.admin.get("/api/v1/tokens"))["items"] if t["name"] == "x"]


# ------------------------------------------------------------------ reads


def test_a_team_member_sees_global_and_own_entries_only(world: World) -> None:
    alpha = world.alpha_editor
    assert _names(alpha) == {"g-prompt", "a-prompt", "g-embeds-b"}
    assert _names(alpha, "resources") == {"g-doc"}
    assert _names(alpha, "tools") == set()
    assert _names(world.beta_viewer) == {"g-prompt", "b-prompt", "g-embeds-b"}
    assert _names(world.beta_viewer, "tools") == {"b-tool"}
    listed = _ok(alpha.get("/api/v1/prompts"))
    assert {i["name"]: i["team"] for i in listed["items"]} == {
        "g-prompt": None,
        "a-prompt": "alpha",
        "g-embeds-b": None,
    }
    assert listed["total"] == 3
    # The team filter: a team, global only, or a team not seen (nothing, as for an unknown one).
    assert _names(alpha, team="alpha") == {"a-prompt"}
    assert _names(alpha, team="-") == {"g-prompt", "g-embeds-b"}
    assert _names(alpha, team="beta") == set() == _names(alpha, team="no-such-team")
    assert _names(world.admin, team="beta") == {"b-prompt"}
    assert alpha.get("/api/v1/prompts", params={"team": "Bad Team"}).status_code == 422

    # Every read of a hidden entry answers like a missing one.
    base = "/api/v1/prompts/b-prompt"
    for method, path, kwargs in (
        ("GET", base, {}),
        ("GET", f"{base}/versions", {}),
        ("GET", f"{base}/versions/1", {}),
        ("GET", f"{base}/diff", {"params": {"from": 1, "to": 2}}),
        ("POST", f"{base}/render", {"json": {"arguments": {"who": "x"}}}),
    ):
        _same_as_missing(alpha, method, path, "b-prompt", **kwargs)
    _same_as_missing(alpha, "GET", "/api/v1/resources/b-doc", "b-doc")
    _same_as_missing(alpha, "GET", "/api/v1/tools/b-tool", "b-tool")
    _same_as_missing(alpha, "POST", "/api/v1/tools/b-tool/test", "b-tool", json={"arguments": {}})

    # A visible prompt that embeds a hidden resource renders as if that resource did not exist.
    own = _ok(world.beta_viewer.post("/api/v1/prompts/g-embeds-b/render", json={}))
    assert own["messages"][0]["content"]["resource"]["text"] == "beta secret"
    refused = alpha.post("/api/v1/prompts/g-embeds-b/render", json={})
    assert refused.status_code == 422 and "is not available" in refused.json()["detail"], refused.text

    # The change log: only changes whose audience includes the caller.
    seen = {c["name"] for c in _changes(alpha)}
    assert {"g-prompt", "a-prompt", "g-doc", "g-embeds-b"} <= seen
    assert not seen & {"b-prompt", "b-doc", "b-tool"}
    assert {c["name"] for c in _changes(world.beta_viewer)} >= {"b-prompt", "b-doc", "b-tool"}
    assert all(c["audience"] == [c["team"] or "*"] for c in _changes(world.admin) if c["action"] == "created")


def test_tokens_without_teams_see_global_entries_as_before(world: World) -> None:
    viewer = world.plain_viewer
    assert _names(viewer) == {"g-prompt", "g-embeds-b"}
    assert _ok(viewer.get("/api/v1/prompts/g-prompt"))["team"] is None
    _same_as_missing(viewer, "GET", "/api/v1/prompts/a-prompt", "a-prompt")
    assert not {c["name"] for c in _changes(viewer)} & {"a-prompt", "b-prompt", "b-doc"}
    # The editor scope still edits global entries (and only those).
    editor = world.global_editor
    _ok(editor.patch("/api/v1/prompts/g-prompt", json={"description": "edited globally"}))
    _same_as_missing(editor, "PATCH", "/api/v1/prompts/a-prompt", "a-prompt", json={"description": "x"})
    assert viewer.patch("/api/v1/prompts/g-prompt", json={"description": "no"}).status_code == 403


def test_admins_see_every_team(world: World) -> None:
    assert {"g-prompt", "a-prompt", "b-prompt", "g-embeds-b"} <= _names(world.admin)
    assert _ok(world.admin.get("/api/v1/prompts/b-prompt"))["team"] == "beta"
    assert {"a-prompt", "b-prompt"} <= {c["name"] for c in _changes(world.admin)}


# ------------------------------------------------------------------ writes


def test_a_team_editor_writes_in_its_team_only(world: World) -> None:
    alpha = world.alpha_editor
    made = _ok(alpha.post("/api/v1/prompts", json=prompt_body("a-new", HELLO, team="alpha")), 201)
    assert made["team"] == "alpha" and made["author"] == "alpha-editor"
    # Another team's: as if that team did not exist; global: visible, but not theirs to write.
    elsewhere = alpha.post("/api/v1/prompts", json=prompt_body("a-elsewhere", HELLO, team="beta"))
    assert elsewhere.status_code == 404 and elsewhere.json()["detail"] == "team 'beta' does not exist"
    unknown = alpha.post("/api/v1/prompts", json=prompt_body("a-elsewhere", HELLO, team="no-such-team"))
    assert unknown.status_code == 404 and unknown.json()["detail"] == "team 'no-such-team' does not exist"
    global_ = alpha.post("/api/v1/prompts", json=prompt_body("a-global", HELLO))
    assert global_.status_code == 403 and "editor role on global entries" in global_.json()["detail"]
    # An admin naming a team that does not exist: invalid.
    missing_team = world.admin.post("/api/v1/prompts", json=prompt_body("x-missing", HELLO, team="no-such-team"))
    assert missing_team.status_code == 422 and "does not exist" in missing_team.json()["detail"]

    _ok(alpha.put("/api/v1/prompts/a-new", json=prompt_body("a-new", "Hi {{ who }}")))
    _ok(alpha.put("/api/v1/prompts/a-new/labels/staging", json={"version": 1}))
    assert alpha.put("/api/v1/prompts/a-new", json={**prompt_body("a-new", HELLO), "team": "beta"}).status_code == 422
    before = _ok(world.admin.get("/api/v1/prompts/g-prompt"))["latest_version"]
    replace = {k: v for k, v in prompt_body("x", "mine").items() if k != "name"}  # the URL names it
    for method, path, body in (
        ("PUT", "/api/v1/prompts/g-prompt", replace),
        ("PATCH", "/api/v1/prompts/g-prompt", {"description": "mine"}),
        ("PUT", "/api/v1/prompts/g-prompt/labels/staging", {"version": 1}),
        ("DELETE", "/api/v1/prompts/g-prompt", None),
        ("PUT", "/api/v1/prompts/g-prompt/team", {"team": "alpha"}),
    ):
        refused = alpha.request(method, path, json=body)
        assert refused.status_code == 403, (method, path, refused.text)
        _same_as_missing(alpha, method, path.replace("g-prompt", "b-prompt"), "b-prompt", json=body)
    assert _ok(world.admin.get("/api/v1/prompts/g-prompt"))["latest_version"] == before
    # A viewer of a team (no editor anywhere) is refused before anything is read.
    viewer_write = world.beta_viewer.post("/api/v1/prompts", json=prompt_body("b-new", HELLO, team="beta"))
    assert viewer_write.status_code == 403 and "lacks the" in viewer_write.json()["detail"]


def test_moving_an_entry_between_teams_is_audited_and_changes_who_sees_it(world: World) -> None:
    admin, alpha, beta = world.admin, world.alpha_editor, world.beta_viewer
    _ok(admin.post("/api/v1/prompts", json=prompt_body("mover", HELLO, team="alpha")), 201)
    assert "mover" in _names(alpha) and "mover" not in _names(beta)

    # An alpha editor may not hand it to a team they are not in, nor make it global.
    refused = alpha.put("/api/v1/prompts/mover/team", json={"team": "beta"})
    assert refused.status_code == 404 and refused.json()["detail"] == "team 'beta' does not exist"
    assert alpha.put("/api/v1/prompts/mover/team", json={"team": None}).status_code == 403
    assert admin.put("/api/v1/prompts/mover/team", json={"team": "nope"}).status_code == 422
    _same_as_missing(world.global_editor, "PUT", "/api/v1/prompts/mover/team", "mover", json={"team": None})

    moved = admin.put("/api/v1/prompts/mover/team", json={"team": "beta", "reason": "beta owns it now"})
    assert _ok(moved)["team"] == "beta" and moved.headers["etag"] == '"v1"'
    assert "mover" not in _names(alpha) and "mover" in _names(beta)
    _same_as_missing(alpha, "GET", "/api/v1/prompts/mover", "mover")
    row = [c for c in _changes(admin) if c["name"] == "mover"][-1]
    assert row["action"] == "team_moved" and row["team"] == "beta"
    assert sorted(row["audience"]) == ["alpha", "beta"]
    assert row["note"] == "team: alpha -> beta" and row["labels"] == ["latest", "production"]
    # Both audiences are told; others are not.
    assert "team_moved" in {c["action"] for c in _changes(alpha) if c["name"] == "mover"}
    assert "team_moved" in {c["action"] for c in _changes(beta) if c["name"] == "mover"}
    assert "mover" not in {c["name"] for c in _changes(world.plain_viewer)}
    # Moving it where it is changes nothing; making it global shows it to everyone.
    assert admin.put("/api/v1/prompts/mover/team", json={"team": "beta"}).status_code == 200
    assert len([c for c in _changes(admin) if c["name"] == "mover" and c["action"] == "team_moved"]) == 1
    _ok(admin.put("/api/v1/prompts/mover/team", json={"team": None}))
    assert "mover" in _names(world.plain_viewer)
    last = [c for c in _changes(world.plain_viewer) if c["name"] == "mover"][-1]
    assert last["action"] == "team_moved" and sorted(last["audience"]) == ["*", "beta"]


def test_a_name_or_uri_another_team_holds_is_taken_and_nothing_more_is_told(world: World) -> None:
    """Names and resource URIs are global keys (agents address entries by them), so creating one
    that another team's entry holds is refused; the refusal says the name is taken, perhaps by an
    entry the caller cannot see, and tells nothing else of that entry (not whose, not what)."""
    alpha = world.alpha_editor
    taken = alpha.post("/api/v1/prompts", json=prompt_body("b-prompt", "mine {{ who }}", team="alpha"))
    assert taken.status_code == 409 and taken.headers["content-type"].startswith(PROBLEM)
    problem = taken.json()
    assert problem == {
        "type": "about:blank",
        "title": "Conflict",
        "status": 409,
        "detail": "the prompt name 'b-prompt' is taken (perhaps by an entry of a team you cannot see): names are "
        "unique across the catalog; choose another",
    }
    uri = alpha.post("/api/v1/resources", json={"name": "a-doc", "uri": "docs://b", "text": "mine", "team": "alpha"})
    assert uri.status_code == 409
    assert uri.json()["detail"] == (
        "the resource URI 'docs://b' is taken (perhaps by a resource of a team you cannot see): URIs are unique "
        "across the catalog; choose another"
    )
    for answer in (taken, uri):
        for secret in ("beta", "b-doc", "beta secret", "v2", "Hello"):
            assert secret not in answer.text, (secret, answer.text)
    # Reading it still answers like a missing entry; nothing was written.
    assert alpha.get("/api/v1/prompts/b-prompt").status_code == 404
    assert _ok(world.admin.get("/api/v1/prompts/b-prompt"))["team"] == "beta"
    assert world.admin.get("/api/v1/resources/a-doc").status_code == 404
