"""Single sign-on: JWTs from an OpenID Connect issuer open the admin API and MCP; the web UI's
sign-in goes through that issuer; RFC 9728 metadata tells clients where to get a token.

One real ``mcp-registry serve`` process per module, configured (``REGISTRY_OIDC_*``) for the
test issuer of ``tests/oidc_issuer.py``, which serves discovery, JWKS, ``/authorize`` and
``/token`` on a loopback port. The verifier's own rules (key refresh limits, claim mapping, an
unreachable issuer) are checked in-process against the same issuer, and the web UI's sign-in
sessions on SQLite and PostgreSQL.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from registry.app import create_app
from registry.catalog.web_sessions import SSO_AGENT_ONLY, UiSessionStore
from registry.config import Settings, SettingsError
from registry.oidc import ID_TOKEN, NO_AUDIENCE, OidcVerifier
from registry.runtime import Registry
from registry.tokens import TokenRejected, TokenService
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient
from tests.oidc_issuer import TestIssuer
from tests.serve_process import ServerProcess, free_port

AUDIENCE = "mcp-registry"
CLIENT_ID = "registry-ui"
CLIENT_SECRET = "ui-client-secret-" + secrets.token_hex(4)


@pytest.fixture(scope="module")
def issuer() -> Iterator[TestIssuer]:
    with TestIssuer(client_id=CLIENT_ID, client_secret=CLIENT_SECRET, audience=AUDIENCE) as running:
        yield running


@pytest.fixture(scope="module")
def server(issuer: TestIssuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    port = free_port()
    env = {
        "REGISTRY_PUBLIC_URL": f"http://127.0.0.1:{port}",  # required with single sign-on for the web UI
        "REGISTRY_OIDC_ISSUER": issuer.url,
        "REGISTRY_OIDC_AUDIENCE": AUDIENCE,
        "REGISTRY_OIDC_CLIENT_ID": CLIENT_ID,
        "REGISTRY_OIDC_CLIENT_SECRET": CLIENT_SECRET,
        # A new key id is fetched at once (the default waits 10 s between such fetches).
        "REGISTRY_OIDC_JWKS_MIN_REFRESH_S": "0",
        # Agents must authenticate, so MCP answers 401 without a token.
        "REGISTRY_ANONYMOUS_AGENTS": "false",
    }
    with ServerProcess(tmp_path_factory.mktemp("sso") / "data", name="sso-registry", env=env, port=port) as process:
        yield process


@pytest.fixture(scope="module")
def ui_only_server(issuer: TestIssuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Single sign-on for the web UI only: no REGISTRY_OIDC_AUDIENCE."""
    port = free_port()
    env = {
        "REGISTRY_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "REGISTRY_OIDC_ISSUER": issuer.url,
        "REGISTRY_OIDC_CLIENT_ID": CLIENT_ID,
        "REGISTRY_OIDC_CLIENT_SECRET": CLIENT_SECRET,
        "REGISTRY_ANONYMOUS_AGENTS": "false",
    }
    data = tmp_path_factory.mktemp("sso-ui-only") / "data"
    with ServerProcess(data, name="sso-ui-only-registry", env=env, port=port) as process:
        yield process


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def mcp_client(server: ServerProcess, token: str | None) -> StreamableHttpClient:
    headers = bearer(token) if token else {}
    return StreamableHttpClient(httpx.Client(base_url=server.url, timeout=30, verify=TLS), extra_headers=headers)


# ------------------------------------------------------------------ accepted


def test_a_jwt_opens_the_admin_api(server: ServerProcess, issuer: TestIssuer) -> None:
    with server.client(issuer.mint()) as http:
        listed = http.get("/api/v1/prompts")
    assert listed.status_code == 200, listed.text
    assert listed.json()["items"], "the demo catalog has prompts"


def test_a_jwt_opens_mcp(server: ServerProcess, issuer: TestIssuer) -> None:
    client = mcp_client(server, issuer.mint())
    try:
        client.initialize()
        answer = client.request("prompts/list", {})
    finally:
        client.http.close()
    assert answer["result"]["prompts"], answer


def test_an_mcp_session_belongs_to_its_user_not_to_a_display_name(server: ServerProcess, issuer: TestIssuer) -> None:
    """Two users who share a display name (the name claim) are still two callers: one cannot use
    the other's session, which is told it does not exist."""
    owner = mcp_client(server, issuer.mint(sub="user-owner", email="same@example.test"))
    other = mcp_client(server, issuer.mint(sub="user-other", email="same@example.test"))
    try:
        owner.initialize()
        assert "result" in owner.request("prompts/list", {})
        other.session_id = owner.session_id
        other.protocol_version = owner.protocol_version
        stolen = other.post({"jsonrpc": "2.0", "id": 1, "method": "prompts/list", "params": {}})
        assert stolen.status_code == 404, stolen.text
        assert "Session not found" in stolen.text
        # The owner, with a fresh token of the same user, keeps it.
        owner.extra_headers = bearer(issuer.mint(sub="user-owner", email="same@example.test"))
        assert "result" in owner.request("prompts/list", {})
    finally:
        owner.http.close()
        other.http.close()


def test_static_tokens_work_beside_single_sign_on(server: ServerProcess) -> None:
    with server.admin() as admin:
        created = admin.post("/api/v1/tokens", json={"name": "static-agent", "scopes": ["agent"]})
        assert created.status_code == 201, created.text
        assert admin.get("/api/v1/prompts").status_code == 200
    client = mcp_client(server, created.json()["token"])
    try:
        client.initialize()
        assert client.request("prompts/list", {})["result"]["prompts"]
    finally:
        client.http.close()
    with server.client("mcpr_unknown-token") as http:
        refused = http.get("/api/v1/prompts")
    assert refused.status_code == 401 and refused.json()["detail"] == "invalid or revoked token"


def test_the_role_claim_sets_the_scope(server: ServerProcess, issuer: TestIssuer) -> None:
    spec = {"name": f"sso-{secrets.token_hex(3)}", "description": "made by a single sign-on user", "template": "Hi"}
    with server.client(issuer.mint(registry_role="viewer")) as viewer:
        assert viewer.get("/api/v1/prompts").status_code == 200
        refused = viewer.post("/api/v1/prompts", json=spec)
    assert refused.status_code == 403, refused.text
    assert "editor" in refused.json()["detail"]
    with server.client(issuer.mint(registry_role="editor", groups=[])) as editor:
        created = editor.post("/api/v1/prompts", json=spec)
        assert created.status_code == 201, created.text
        history = editor.get(f"/api/v1/prompts/{spec['name']}/versions")
    assert history.status_code == 200
    # No role claim: the default role (viewer); an agent opens MCP only.
    with server.client(issuer.mint(registry_role=None)) as default:
        assert default.get("/api/v1/prompts").status_code == 200
        assert default.post("/api/v1/prompts", json={**spec, "name": spec["name"] + "-2"}).status_code == 403
    agent_token = issuer.mint(registry_role="agent")
    with server.client(agent_token) as agent:
        assert agent.get("/api/v1/prompts").status_code == 403
    client = mcp_client(server, agent_token)
    try:
        client.initialize()
        names = {p["name"] for p in client.request("prompts/list", {})["result"]["prompts"]}
    finally:
        client.http.close()
    assert spec["name"] in names


def test_a_team_member_does_not_see_another_teams_entries(server: ServerProcess, issuer: TestIssuer) -> None:
    """With teams in place: an SSO user whose groups claim says ``payments`` sees payments'
    entries and global ones, never billing's, on the admin API and over MCP."""
    suffix = secrets.token_hex(3)
    payments, billing = f"payments-{suffix}", f"billing-{suffix}"
    with server.admin() as admin:
        for team in (payments, billing):
            made = admin.post("/api/v1/teams", json={"name": team, "title": team})
            if made.status_code in (404, 405):
                pytest.skip("the teams API is not in this build yet (the claim mapping is tested below)")
            assert made.status_code == 201, made.text
        for team in (payments, billing):
            body = {"name": f"{team}-prompt", "description": "a team's prompt", "template": "Hi", "team": team}
            created = admin.post("/api/v1/prompts", json=body)
            assert created.status_code == 201, created.text
    member = issuer.mint(registry_role="viewer", groups=[f"{payments}:editor", "not a team!"])
    with server.client(member) as http:
        assert http.get(f"/api/v1/prompts/{payments}-prompt").status_code == 200
        hidden = http.get(f"/api/v1/prompts/{billing}-prompt")
        assert hidden.status_code == 404, hidden.text
        names = {item["name"] for item in http.get("/api/v1/prompts", params={"limit": 500}).json()["items"]}
    assert f"{payments}-prompt" in names and f"{billing}-prompt" not in names
    client = mcp_client(server, member)
    try:
        client.initialize()
        served = {p["name"] for p in client.request("prompts/list", {})["result"]["prompts"]}
    finally:
        client.http.close()
    assert f"{billing}-prompt" not in served


# ------------------------------------------------------------------ refused


def _refusals(issuer: TestIssuer) -> dict[str, tuple[str, str]]:
    """Tokens the registry must refuse, each with the reason it must give."""
    now = int(time.time())
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return {
        "expired": (issuer.mint(exp=now - 120, iat=now - 600, nbf=now - 600), "token expired"),
        "not yet valid": (issuer.mint(nbf=now + 600), "token not valid yet"),
        "issued in the future": (issuer.mint(iat=now + 600), "token not valid yet"),
        "wrong audience": (issuer.mint(aud="someone-else"), "wrong audience"),
        "wrong issuer": (issuer.mint(iss="http://127.0.0.1:9/other"), "wrong issuer"),
        "unknown key": (issuer.mint(key=stranger, kid="not-published"), "unknown signing key"),
        "forged signature": (issuer.mint(key=stranger), "invalid signature"),
        "alg confusion": (
            issuer.mint_hs256_with_public_key(),
            "signing algorithm HS256 not accepted (use one of RS256, RS384, RS512, PS256, PS384, PS512, "
            "ES256, ES384, ES512, EdDSA)",
        ),
        "alg none": (
            issuer.unsigned(),
            "signing algorithm none not accepted (use one of RS256, RS384, RS512, PS256, PS384, PS512, "
            "ES256, ES384, ES512, EdDSA)",
        ),
        "no subject": (issuer.mint(sub=None), "token lacks the 'sub' claim"),
        # An ID token (it carries a nonce) for this audience is still no access token.
        "id token": (issuer.mint(nonce="n-1", azp=CLIENT_ID), ID_TOKEN),
        # RFC 9068: a typ other than at+jwt (or the generic JWT) says it is some other kind of token.
        "other token type": (
            issuer.mint(headers={"typ": "logout+jwt"}),
            "a token of type logout+jwt is not an access token (RFC 9068: at+jwt)",
        ),
        "no expiry": (issuer.mint(exp=None), "token lacks the 'exp' claim"),
        "garbage jwt": ("bm90IGpzb24.bm90IGpzb24.c2ln", "malformed token"),
        "garbage": ("not-a-token-at-all", "invalid or revoked token"),
    }


def test_bad_tokens_get_401_with_the_reason_on_the_admin_api(server: ServerProcess, issuer: TestIssuer) -> None:
    for case, (token, reason) in _refusals(issuer).items():
        with server.client(token) as http:
            answer = http.get("/api/v1/prompts")
        assert answer.status_code == 401, (case, answer.text)
        assert answer.json()["detail"] == reason, case
        challenge = answer.headers["www-authenticate"]
        assert 'error="invalid_token"' in challenge, case
        assert f'resource_metadata="{server.url}/.well-known/oauth-protected-resource"' in challenge, case
    # Access tokens typed as RFC 9068 says, or with the generic JWT type most issuers use, are taken.
    for typ in ("at+jwt", "application/at+jwt", "JWT"):
        with server.client(issuer.mint(headers={"typ": typ})) as http:
            listed = http.get("/api/v1/prompts")
        assert listed.status_code == 200, (typ, listed.text)


def test_bad_tokens_get_401_with_the_reason_over_mcp(server: ServerProcess, issuer: TestIssuer) -> None:
    for case, (token, reason) in _refusals(issuer).items():
        client = mcp_client(server, token)
        try:
            answer = client.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
        finally:
            client.http.close()
        assert answer.status_code == 401, (case, answer.text)
        assert answer.json()["error"]["message"] == f"Unauthorized: {reason}", case
        challenge = answer.headers["www-authenticate"]
        assert f'error_description="{reason}"' in challenge, case
        assert f'resource_metadata="{server.url}/.well-known/oauth-protected-resource/mcp"' in challenge, case


def test_a_rotated_key_is_accepted_without_a_restart(server: ServerProcess, issuer: TestIssuer) -> None:
    old_kid = issuer.signing_kid
    old_key = issuer.keys[old_kid]
    with server.client(issuer.mint()) as http:
        assert http.get("/api/v1/prompts").status_code == 200  # the old key is known
    new_kid = issuer.add_key(current=True)
    issuer.remove_key(old_kid)
    fetched = issuer.jwks_fetches
    try:
        with server.client(issuer.mint()) as http:
            answer = http.get("/api/v1/prompts")
        assert answer.status_code == 200, answer.text
        assert issuer.jwks_fetches == fetched + 1  # the unknown key id fetched the JWKS once
        # The JWKS fetched no longer lists the retired key: a new token signed with it is refused.
        with server.client(issuer.mint(key=old_key, kid=old_kid, registry_role="viewer")) as http:
            retired = http.get("/api/v1/prompts")
        assert retired.status_code == 401 and retired.json()["detail"] == "unknown signing key"
        # An EC key (ES256) works too.
        issuer.add_key("EC", current=True)
        with server.client(issuer.mint()) as http:
            assert http.get("/api/v1/prompts").status_code == 200
    finally:
        issuer.keys[old_kid] = old_key
        issuer.signing_kid = new_kid


# ------------------------------------------------------------------ RFC 9728


def test_protected_resource_metadata(server: ServerProcess, issuer: TestIssuer) -> None:
    with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as http:
        for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
            answer = http.get(path)
            assert answer.status_code == 200, answer.text
            assert answer.json() == {
                "resource": f"{server.url}/mcp",
                "authorization_servers": [issuer.url],
                "bearer_methods_supported": ["header"],
                "scopes_supported": ["openid", "profile", "email"],
                "resource_name": "mcp-registry",
            }
        no_token = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
        assert no_token.status_code == 401
        assert no_token.json()["error"]["message"] == "Unauthorized: send Authorization: Bearer <agent token>"
        pointer = re.search(r'resource_metadata="([^"]+)"', no_token.headers["www-authenticate"])
        assert pointer and pointer.group(1) == f"{server.url}/.well-known/oauth-protected-resource/mcp"
        # The pointer leads to the document that names the issuer.
        assert http.get(pointer.group(1)).json()["authorization_servers"] == [issuer.url]
        api = http.get("/api/v1/prompts")
        assert api.status_code == 401
        assert 'resource_metadata="' in api.headers["www-authenticate"]


def test_no_metadata_without_single_sign_on(live_server: Any) -> None:
    with httpx.Client(base_url=live_server.url, timeout=30, verify=TLS) as http:
        answer = http.get("/.well-known/oauth-protected-resource/mcp")
        assert answer.status_code == 404
        assert "REGISTRY_OIDC_ISSUER" in answer.json()["detail"]
        assert "resource_metadata" not in http.get("/api/v1/prompts").headers["www-authenticate"]


# ------------------------------------------------------------------ web UI sign-in over HTTP


def _start(http: httpx.Client, next_path: str = "/ui/prompts") -> httpx.Response:
    """``/ui/sso/start``, then the issuer's ``/authorize``: the issuer's redirect back to us."""
    started = http.get("/ui/sso/start", params={"next": next_path})
    assert started.status_code == 303, started.text
    approved = http.get(started.headers["location"])
    assert approved.status_code == 302, approved.text
    return approved


def test_the_ui_signs_in_through_the_issuer(server: ServerProcess, issuer: TestIssuer) -> None:
    with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as http:
        page = http.get("/ui/signin")
        assert "Sign in with single sign-on" in page.text
        started = http.get("/ui/sso/start", params={"next": "/ui/prompts"})
        assert started.status_code == 303
        location = urlsplit(started.headers["location"])
        assert f"{location.scheme}://{location.netloc}{location.path}" == f"{issuer.url}/authorize"
        query = {k: v[0] for k, v in parse_qs(location.query).items()}
        assert query["response_type"] == "code" and query["client_id"] == CLIENT_ID
        assert query["redirect_uri"] == f"{server.url}/ui/sso/callback"
        assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
        assert query["scope"] == "openid profile email" and query["state"] and query["nonce"]
        flow_cookie = started.headers["set-cookie"]
        assert "HttpOnly" in flow_cookie and "Path=/ui/sso" in flow_cookie
        back = http.get(started.headers["location"])
        assert back.status_code == 302
        done = http.get(back.headers["location"])
        assert done.status_code == 303, done.text
        assert done.headers["location"] == "/ui/prompts"
        assert issuer.token_auth[-1] == "basic"  # the client secret, as the issuer prefers
        home = http.get("/ui/")
        assert home.status_code == 200
        assert "alice@example.test" in home.text
        # The code was used once: replaying the answer finds no flow cookie any more.
        replay = http.get(back.headers["location"])
        assert replay.status_code == 400 and "Start it again" in replay.text


def test_a_tampered_state_is_refused(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as http:
        back = _start(http)
        parts = urlsplit(back.headers["location"])
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        forged = http.get("/ui/sso/callback", params={"code": query["code"], "state": query["state"] + "x"})
        assert forged.status_code == 400
        assert "state does not match" in forged.text
        assert http.get("/ui/", follow_redirects=False).status_code in (302, 303, 307)  # not signed in


def test_a_flow_cookie_from_elsewhere_is_refused(server: ServerProcess) -> None:
    """An answer brought to a browser that did not start the sign-in (login CSRF), or whose flow
    cookie was altered, opens no session."""
    with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as attacker:
        back = _start(attacker)
    with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as victim:
        answer = victim.get(back.headers["location"])
        assert answer.status_code == 400 and "Start it again" in answer.text
        victim.cookies.set("mcpr_ui_sso", "eyJzdGF0ZSI6IngifQ.AAAA", path="/ui/sso")
        altered = victim.get(back.headers["location"])
        assert altered.status_code == 400 and "Start it again" in altered.text


def test_the_issuer_refusing_is_shown(server: ServerProcess, issuer: TestIssuer) -> None:
    issuer.deny = "access_denied"
    try:
        with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as http:
            back = _start(http)
            answer = http.get(back.headers["location"])
    finally:
        issuer.deny = None
    assert answer.status_code == 401
    assert "did not sign you in (access_denied)" in answer.text


def test_an_agent_role_cannot_open_the_ui(server: ServerProcess, issuer: TestIssuer) -> None:
    saved = dict(issuer.user)
    issuer.user["registry_role"] = "agent"
    try:
        with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as http:
            back = _start(http)
            answer = http.get(back.headers["location"])
    finally:
        issuer.user = saved
    assert answer.status_code == 403
    assert "agent role" in answer.text


def test_a_pasted_access_token_signs_in_until_it_expires(server: ServerProcess, issuer: TestIssuer) -> None:
    nonce = re.compile(r'name="signin_nonce" value="([^"]+)"')
    with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as http:
        form = http.get("/ui/signin")
        match = nonce.search(form.text)
        assert match
        token = issuer.mint(exp=int(time.time()) + 120)
        signed = http.post("/ui/signin", data={"token": token, "signin_nonce": match.group(1), "next": "/ui/"})
        assert signed.status_code == 303, signed.text
        cookie = signed.headers["set-cookie"]
        max_age = int(re.search(r"Max-Age=(\d+)", cookie).group(1))  # type: ignore[union-attr]
        assert 60 < max_age <= 120
        assert "alice@example.test" in http.get("/ui/").text


# ------------------------------------------------------------------ the verifier in-process


def _settings(issuer: TestIssuer, **changes: Any) -> Settings:
    return Settings(oidc_issuer=issuer.url, oidc_audience=AUDIENCE, oidc_client_id=CLIENT_ID).with_overrides(**changes)


def test_unknown_key_ids_fetch_the_jwks_at_most_every_min_refresh(issuer: TestIssuer) -> None:
    verifier = OidcVerifier(_settings(issuer, oidc_jwks_min_refresh_s=1.0))
    try:
        verifier.verify(issuer.mint())
        time.sleep(1.05)
        fetched = issuer.jwks_fetches
        stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        for attempt in range(5):
            with pytest.raises(TokenRejected, match="unknown signing key"):
                verifier.verify(issuer.mint(key=stranger, kid=f"made-up-{attempt}"))
        assert issuer.jwks_fetches == fetched + 1, "made-up key ids must not make the registry hammer the issuer"
        # A real rotation within that window waits for the next allowed fetch, then works.
        rotated = issuer.add_key()
        with pytest.raises(TokenRejected, match="unknown signing key"):
            verifier.verify(issuer.mint(kid=rotated))
        time.sleep(1.05)
        assert verifier.verify(issuer.mint(kid=rotated)).user == "user-alice"
        assert issuer.jwks_fetches == fetched + 2
    finally:
        verifier.close()


def test_an_unreachable_issuer(issuer: TestIssuer) -> None:
    settings = Settings(oidc_issuer=f"http://127.0.0.1:{free_port()}", oidc_audience=AUDIENCE)
    verifier = OidcVerifier(settings)
    try:
        with pytest.raises(TokenRejected, match=r"^identity provider unreachable$"):
            verifier.verify(issuer.mint())
    finally:
        verifier.close()


def test_the_discovery_document_must_name_the_configured_issuer(issuer: TestIssuer) -> None:
    verifier = OidcVerifier(_settings(issuer, oidc_issuer=issuer.url + "/"))
    try:
        with pytest.raises(TokenRejected, match=r"^identity provider unreachable$"):
            verifier.verify(issuer.mint())
    finally:
        verifier.close()


def test_claims_become_a_principal(issuer: TestIssuer) -> None:
    verifier = OidcVerifier(_settings(issuer, oidc_name_claim="name", oidc_teams_claim="teams"))
    try:
        principal = verifier.verify(
            issuer.mint(
                name="Alice A.",
                registry_role=["viewer", "reviewer", "nonsense"],
                teams={"payments": "admin", "Bad Team": "viewer", "ops": "owner", "web": "editor"},
            )
        )
        assert principal.user == "user-alice" and principal.name == "Alice A." and principal.token_id is None
        assert principal.scopes == frozenset({"reviewer"})  # the strongest of a list
        assert principal.teams == (("payments", "admin"), ("web", "editor"))  # invalid ones ignored
        assert principal.key == "user:user-alice"
        assert principal.expires_at is not None
        strings = verifier.verify(
            issuer.mint(registry_role="root", teams=["payments", "payments:reviewer", "ops:bogus", 7, "web:viewer"])
        )
        assert strings.scopes == frozenset({"viewer"})  # not a scope: the default role
        assert strings.teams == (("payments", "reviewer"), ("web", "viewer"))  # the strongest role per team
        many = verifier.verify(issuer.mint(teams=[f"t{n}" for n in range(1000)]))
        assert len(many.teams) == 256  # bounded
        unnamed = verifier.verify(issuer.mint(name=None))
        assert unnamed.name == "user-alice"  # no name claim: the user
    finally:
        verifier.close()


def test_the_id_token_needs_the_client_audience_and_the_nonce(issuer: TestIssuer) -> None:
    verifier = OidcVerifier(_settings(issuer))
    try:
        good = issuer.mint(aud=CLIENT_ID, nonce="n-1")
        assert verifier.verify_id_token(good, "n-1").user == "user-alice"
        with pytest.raises(TokenRejected, match="nonce"):
            verifier.verify_id_token(good, "n-2")
        with pytest.raises(TokenRejected, match="nonce"):
            verifier.verify_id_token(issuer.mint(aud=CLIENT_ID), "n-1")
        with pytest.raises(TokenRejected, match="wrong audience"):
            verifier.verify_id_token(issuer.mint(nonce="n-1"), "n-1")  # an access token is no ID token
        with pytest.raises(TokenRejected, match="wrong audience"):
            verifier.verify(good)  # and an ID token is no access token
    finally:
        verifier.close()


def test_a_static_token_with_dots_is_still_looked_up(issuer: TestIssuer, registry: Registry) -> None:
    """An operator's token that happens to look like a JWT (three dotted parts) is not lost."""
    tokens = TokenService(registry.db, jwt_verifier=OidcVerifier(_settings(issuer)))
    value = "team.admin.token"
    tokens.create("dotted", ["viewer"], value=value)
    assert tokens.verify(value).name == "dotted"
    assert tokens.verify(issuer.mint()).user == "user-alice"
    with pytest.raises(TokenRejected, match=r"^malformed token$"):
        tokens.verify("abc.def.ghi")


def test_single_sign_on_ui_sessions(registry: Registry, tmp_path: Path) -> None:
    """SSO sessions have no token row: ``find`` rebuilds the principal from the stored identity
    (on SQLite and PostgreSQL), ends them with the session, and they end on sign-out."""
    from registry.tokens import Principal

    store = UiSessionStore(registry.db, registry.tokens, hours=100)
    principal = Principal(None, "Alice", frozenset({"editor"}), teams=(("payments", "reviewer"),), user="user-alice")
    secret, session = store.sign_in_identity(principal)
    hours = (session.expires_at.timestamp() - time.time()) / 3600
    assert 11.9 < hours <= 12.0  # at most SSO_SESSION_HOURS, whatever REGISTRY_UI_SESSION_HOURS says
    found = store.find(secret)
    assert found is not None
    assert found.principal.user == "user-alice" and found.principal.name == "Alice"
    assert found.principal.scopes == frozenset({"editor"}) and found.principal.token_id is None
    assert found.principal.teams == (("payments", "reviewer"),)
    assert found.can_edit and not found.is_admin and found.csrf_token == session.csrf_token
    # Token sessions still work beside them (the outer join).
    token_secret, _ = store.sign_in(registry.settings.admin_token or "")
    assert store.find(token_secret) is not None and store.find(token_secret).principal.token_id is not None  # type: ignore[union-attr]
    store.sign_out(secret)
    assert store.find(secret) is None
    with pytest.raises(TokenRejected) as refused:
        store.sign_in_identity(Principal(None, "Bot", frozenset({"agent"}), user="bot"))
    assert refused.value.reason == SSO_AGENT_ONLY


# ------------------------------------------------------------------ bearer tokens need their own audience


def _id_token(issuer: TestIssuer) -> str:
    """What the issuer's /token answers as the ID token of a web UI sign-in: audience the client
    id, with the sign-in's nonce."""
    return issuer.mint(aud=CLIENT_ID, azp=CLIENT_ID, nonce="sign-in-nonce", auth_time=int(time.time()))


def test_without_an_audience_no_bearer_jwt_opens_the_api_or_mcp(
    ui_only_server: ServerProcess, issuer: TestIssuer
) -> None:
    """REGISTRY_OIDC_AUDIENCE unset: an ID token (audience = the client id) is not taken as an
    access token, nor is any other JWT; the refusal says which setting is missing."""
    for token in (_id_token(issuer), issuer.mint(aud=CLIENT_ID), issuer.mint()):
        with ui_only_server.client(token) as http:
            answer = http.get("/api/v1/prompts")
        assert answer.status_code == 401, answer.text
        assert answer.json()["detail"] == NO_AUDIENCE
        assert "resource_metadata" not in answer.headers["www-authenticate"]
        client = mcp_client(ui_only_server, token)
        try:
            refused = client.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
        finally:
            client.http.close()
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["message"] == f"Unauthorized: {NO_AUDIENCE}"
    with httpx.Client(base_url=ui_only_server.url, timeout=30, verify=TLS) as http:
        metadata = http.get("/.well-known/oauth-protected-resource/mcp")
    assert metadata.status_code == 404 and "REGISTRY_OIDC_AUDIENCE" in metadata.json()["detail"]
    # The web UI's sign-in (which verifies the ID token as such) still works there.
    with httpx.Client(base_url=ui_only_server.url, timeout=30, verify=TLS) as http:
        back = _start(http)
        done = http.get(back.headers["location"])
        assert done.status_code == 303, done.text
        assert "alice@example.test" in http.get("/ui/").text


def test_bearer_verification_refuses_id_tokens_and_needs_an_audience(issuer: TestIssuer) -> None:
    ui_only = OidcVerifier(Settings(oidc_issuer=issuer.url, oidc_client_id=CLIENT_ID))
    try:
        with pytest.raises(TokenRejected) as refused:
            ui_only.verify(_id_token(issuer))
        assert refused.value.reason == NO_AUDIENCE
        assert ui_only.verify_id_token(_id_token(issuer), "sign-in-nonce").user == "user-alice"
    finally:
        ui_only.close()
    # The audience set to the client id (as some issuers' setups have it): the ID token is refused
    # by its nonce, an access token for that audience is taken.
    shared = OidcVerifier(_settings(issuer, oidc_audience=CLIENT_ID))
    try:
        with pytest.raises(TokenRejected) as refused:
            shared.verify(_id_token(issuer))
        assert refused.value.reason == ID_TOKEN
        assert shared.verify(issuer.mint(aud=CLIENT_ID, headers={"typ": "at+jwt"})).user == "user-alice"
    finally:
        shared.close()


# ------------------------------------------------------------------ sign-in redirects never from the Host header


def test_single_sign_on_for_the_ui_needs_the_public_url(
    server: ServerProcess, issuer: TestIssuer, tmp_path: Path
) -> None:
    """Without REGISTRY_PUBLIC_URL the sign-in's redirect_uri would come from the Host header
    (``Host: attacker.example``): the server refuses to start, naming the setting."""
    env = {"REGISTRY_OIDC_ISSUER": issuer.url, "REGISTRY_OIDC_CLIENT_ID": CLIENT_ID}
    process = ServerProcess(tmp_path / "data", name="sso-no-public-url", env=env)
    with pytest.raises(RuntimeError, match="exited with 2") as failed:
        process.start()
    process.stop()
    assert "single sign-on for the web UI (REGISTRY_OIDC_CLIENT_ID) needs REGISTRY_PUBLIC_URL" in str(failed.value)
    # The app refuses the same settings however it is built (a worker, an embedding).
    settings = Settings(data_dir=tmp_path / "app", oidc_issuer=issuer.url, oidc_client_id=CLIENT_ID)
    registry = Registry(settings)
    try:
        with pytest.raises(SettingsError, match="needs REGISTRY_PUBLIC_URL"):
            create_app(registry)
    finally:
        registry.close()
    # With it, the redirect is the configured address whatever Host the request names.
    with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as http:
        started = http.get("/ui/sso/start", headers={"Host": "attacker.example"})
    assert started.status_code == 303, started.text
    query = {k: v[0] for k, v in parse_qs(urlsplit(started.headers["location"]).query).items()}
    assert query["redirect_uri"] == f"{server.url}/ui/sso/callback"
