"""Bearer tokens and scopes on the admin API, over real HTTP."""

from __future__ import annotations

import httpx
import pytest

from registry.runtime import Registry
from tests.conftest import ADMIN_TOKEN, LiveServer

PROBLEM = "application/problem+json"
PROMPT = {"name": "hello", "arguments": [{"name": "who"}], "template": "Hi {{ who }}"}
TOOL = {"name": "ping", "webhook": {"url": "https://93.184.216.34/ping"}}
RESOURCE = {"name": "doc", "uri": "docs://doc", "text": "hello"}

#: Every admin endpoint, as (method, path, JSON body), on entries that exist.
ADMIN_ENDPOINTS: list[tuple[str, str, object]] = [
    ("GET", "/api/v1/changes", None),
    ("GET", "/api/v1/tokens", None),
    ("POST", "/api/v1/tokens", {"name": "x", "scopes": ["viewer"]}),
    ("DELETE", "/api/v1/tokens/1", None),
    ("POST", "/api/v1/prompts/hello/render", {"arguments": {"who": "a"}}),
]
for _collection, _body in (("prompts", PROMPT), ("resources", RESOURCE), ("tools", TOOL)):
    _item = f"/api/v1/{_collection}/{_body['name']}"
    ADMIN_ENDPOINTS += [
        ("GET", f"/api/v1/{_collection}", None),
        ("POST", f"/api/v1/{_collection}", {**_body, "name": "other"}),
        ("GET", _item, None),
        ("PUT", _item, _body),
        ("DELETE", _item, None),
        ("POST", f"{_item}/restore", None),
        ("GET", f"{_item}/versions", None),
        ("GET", f"{_item}/versions/1", None),
        ("GET", f"{_item}/diff?from=1&to=1", None),
        ("PUT", f"{_item}/labels/staging", {"version": 1}),
        ("DELETE", f"{_item}/labels/production", None),
    ]
WRITE_ENDPOINTS = [e for e in ADMIN_ENDPOINTS if e[0] != "GET" and "/tokens" not in e[1] and "/render" not in e[1]]
READ_ENDPOINTS = [e for e in ADMIN_ENDPOINTS if (e[0] == "GET" and "/tokens" not in e[1]) or "/render" in e[1]]


def call(client: httpx.Client, endpoint: tuple[str, str, object]) -> httpx.Response:
    method, path, body = endpoint
    return client.request(method, path, json=body)


def token(registry: Registry, *scopes: str, label: str | None = None) -> str:
    value, _info = registry.tokens.create(f"{'+'.join(scopes)} token", scopes, label=label)
    return value


@pytest.fixture
def catalog(api: httpx.Client) -> httpx.Client:
    for collection, body in (("prompts", PROMPT), ("resources", RESOURCE), ("tools", TOOL)):
        api.post(f"/api/v1/{collection}", json=body).raise_for_status()
    return api


def entry_state(api: httpx.Client) -> list[object]:
    """Everything a write could change, read with the admin token."""
    state: list[object] = [api.get("/api/v1/changes").json()]
    for collection in ("prompts", "resources", "tools"):
        state.append(api.get(f"/api/v1/{collection}", params={"archived": "true"}).json())
        state.append(api.get(f"/api/v1/{collection}").json())
    tokens = api.get("/api/v1/tokens").json()["items"]
    state.append([{k: v for k, v in t.items() if k != "last_used_at"} for t in tokens])
    return state


def test_missing_token_is_401_with_challenge(catalog: httpx.Client, live_server: LiveServer) -> None:
    with live_server.client(token=None) as anonymous:
        for endpoint in ADMIN_ENDPOINTS:
            response = call(anonymous, endpoint)
            assert response.status_code == 401, endpoint
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.headers["content-type"].startswith(PROBLEM)
            assert "missing bearer token" in response.json()["detail"]
        # Health endpoints need no token.
        assert anonymous.get("/healthz").json()["status"] == "ok"
        assert anonymous.get("/readyz").json() == {"status": "ok", "detail": "ok"}
        # A non-Bearer scheme is no token either.
        basic = anonymous.get("/api/v1/prompts", headers={"Authorization": f"Basic {ADMIN_TOKEN}"})
        assert basic.status_code == 401


def test_wrong_token_is_401(catalog: httpx.Client, live_server: LiveServer) -> None:
    before = entry_state(catalog)
    with live_server.client(token="mcpr_not-a-real-token") as stranger:
        for endpoint in ADMIN_ENDPOINTS:
            response = call(stranger, endpoint)
            assert response.status_code == 401, endpoint
            assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'
            assert response.json()["detail"] == "invalid or revoked token"
    assert entry_state(catalog) == before


def test_agent_token_is_refused_everywhere_on_the_admin_api(
    catalog: httpx.Client, live_server: LiveServer, registry: Registry
) -> None:
    agent_token = token(registry, "agent", label="staging")
    before = entry_state(catalog)
    with live_server.client(token=agent_token) as agent:
        for endpoint in ADMIN_ENDPOINTS:
            response = call(agent, endpoint)
            assert response.status_code == 403, (endpoint, response.text)
            assert response.headers["content-type"].startswith(PROBLEM)
            assert "lacks the" in response.json()["detail"]
    assert entry_state(catalog) == before


def test_viewer_reads_but_cannot_write(catalog: httpx.Client, live_server: LiveServer, registry: Registry) -> None:
    viewer_token = token(registry, "viewer")
    before = entry_state(catalog)
    with live_server.client(token=viewer_token) as viewer:
        for endpoint in READ_ENDPOINTS:
            response = call(viewer, endpoint)
            assert response.status_code == 200, (endpoint, response.text)
        for endpoint in [*WRITE_ENDPOINTS, *[e for e in ADMIN_ENDPOINTS if "/tokens" in e[1]]]:
            response = call(viewer, endpoint)
            assert response.status_code == 403, (endpoint, response.text)
            assert "lacks the" in response.json()["detail"]
    assert entry_state(catalog) == before


def test_editor_writes_but_cannot_manage_tokens(
    catalog: httpx.Client, live_server: LiveServer, registry: Registry
) -> None:
    with live_server.client(token=token(registry, "editor")) as editor:
        created = editor.post("/api/v1/prompts", json={**PROMPT, "name": "by-editor"})
        assert created.status_code == 201
        assert created.json()["author"] == "editor token"
        assert editor.put("/api/v1/prompts/hello", json=PROMPT).status_code == 200
        for method, path in (("POST", "/api/v1/tokens"), ("GET", "/api/v1/tokens"), ("DELETE", "/api/v1/tokens/1")):
            response = editor.request(method, path, json={"name": "mine", "scopes": ["admin"]})
            assert response.status_code == 403, response.text
            assert "'admin' scope" in response.json()["detail"]
    assert [t["name"] for t in catalog.get("/api/v1/tokens").json()["items"]] == [
        "admin (REGISTRY_ADMIN_TOKEN)",
        "editor token",
    ]


def test_token_lifecycle(catalog: httpx.Client, live_server: LiveServer) -> None:
    created = catalog.post("/api/v1/tokens", json={"name": "ci", "scopes": ["viewer", "editor"]})
    assert created.status_code == 201, created.text
    info = created.json()
    secret = info["token"]
    assert secret.startswith("mcpr_") and len(secret) > 30
    assert info["scopes"] == ["editor", "viewer"]
    assert info["revoked"] is False
    assert info["created_by"] == "admin (REGISTRY_ADMIN_TOKEN)"

    listed = catalog.get("/api/v1/tokens")
    assert secret not in listed.text
    assert all("token" not in item and "token_hash" not in item for item in listed.json()["items"])
    assert [t["name"] for t in listed.json()["items"]] == ["admin (REGISTRY_ADMIN_TOKEN)", "ci"]

    with live_server.client(token=secret) as ci:
        assert ci.get("/api/v1/prompts").status_code == 200  # now cached for a few seconds
        revoked = catalog.delete(f"/api/v1/tokens/{info['id']}")
        assert revoked.status_code == 200
        assert revoked.json()["revoked"] is True
        # Revocation clears the cache: refused at once, not after the cache expires.
        refused = ci.get("/api/v1/prompts")
        assert refused.status_code == 401
        assert refused.json()["detail"] == "invalid or revoked token"

    listed = catalog.get("/api/v1/tokens").json()["items"]
    assert [t["revoked"] for t in listed] == [False, True]
    assert listed[1]["last_used_at"] is not None
    assert catalog.delete("/api/v1/tokens/999").status_code == 404


def test_invalid_token_requests_are_422(catalog: httpx.Client) -> None:
    cases: list[tuple[dict[str, object], str]] = [
        ({"name": "x", "scopes": ["root"]}, "scopes must be a non-empty subset"),
        ({"name": "x", "scopes": []}, "scopes"),
        ({"name": "", "scopes": ["viewer"]}, "name"),
        ({"name": "x", "scopes": ["agent"], "label": "Not A Label"}, "invalid label"),
    ]
    for body, fragment in cases:
        response = catalog.post("/api/v1/tokens", json=body)
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith(PROBLEM)
        assert fragment in response.json()["detail"], body
    assert len(catalog.get("/api/v1/tokens").json()["items"]) == 1
