"""Single sign-on in a real browser: Chromium signs in to the web UI through the test issuer
(``tests/oidc_issuer.py``) and out again; a sign-in answer whose state was tampered with is refused.

The server here is a registry of its own (the package's ``ui_server`` has no single sign-on),
configured with ``REGISTRY_OIDC_*`` for the issuer on its loopback port. Every page the browser
lands on is checked like the other UI tests' (no console error, no serious axe violation).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import pytest
from playwright.sync_api import Browser, Route

from tests.oidc_issuer import TestIssuer
from tests.serve_process import ServerProcess, free_port
from tests.ui.conftest import UiPage, UiServer

CLIENT_ID = "registry-ui-browser"


@pytest.fixture(scope="module")
def issuer() -> Iterator[TestIssuer]:
    user = {"sub": "user-bea", "email": "bea@example.test", "registry_role": "editor", "groups": ["web:viewer"]}
    with TestIssuer(client_id=CLIENT_ID, audience="mcp-registry", user=user) as running:
        yield running


@pytest.fixture(scope="module")
def sso_server(issuer: TestIssuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    port = free_port()
    env = {
        "REGISTRY_OIDC_ISSUER": issuer.url,
        "REGISTRY_OIDC_AUDIENCE": "mcp-registry",
        "REGISTRY_OIDC_CLIENT_ID": CLIENT_ID,  # a public client: PKCE, no secret
        "REGISTRY_PUBLIC_URL": f"http://127.0.0.1:{port}",  # sign-in redirects are built from it
    }
    data = tmp_path_factory.mktemp("sso-ui") / "data"
    with ServerProcess(data, name="sso-ui-registry", env=env, port=port) as process:
        yield UiServer(process)


@pytest.fixture
def sso_ui(browser: Browser, sso_server: UiServer, axe_source: str, screenshot_dir: Path) -> Iterator[UiPage]:
    context = browser.new_context(viewport={"width": 1366, "height": 860})
    try:
        yield UiPage(context, sso_server, axe_source, screenshot_dir)
    finally:
        context.close()


def test_sign_in_and_out_through_the_issuer(sso_ui: UiPage, issuer: TestIssuer) -> None:
    page = sso_ui.goto("/ui/signin?next=/ui/prompts")
    button = page.get_by_role("link", name="Sign in with single sign-on")
    assert button.is_visible()
    sso_ui.shot("sso-signin")
    with page.expect_navigation(url=re.compile(r".*/ui/prompts$")):
        button.click()
    sso_ui.check()
    assert page.locator(".who-name").inner_text() == "bea@example.test"
    assert page.locator(".badge.scope").inner_text() == "editor"
    assert issuer.token_auth[-1] == "none"  # a public client: the PKCE verifier alone
    sso_ui.shot("sso-signed-in")

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(re.compile(r".*/ui/signin\?signed_out=1$"))
    sso_ui.check()
    assert page.get_by_role("status").inner_text() == "You are signed out."
    sso_ui.goto("/ui/prompts")  # the session is gone: back to the sign-in page
    assert "/ui/signin" in page.url


def test_a_tampered_state_is_refused_in_the_browser(sso_ui: UiPage) -> None:
    """The ``state`` is altered on its way to the issuer (which echoes it back to the callback):
    it no longer matches this browser's sign-in, so no session is opened."""
    page = sso_ui.page

    def tamper(route: Route) -> None:
        # Playwright does not route the requests of a redirect chain: answer /ui/sso/start with
        # the server's own redirect (and its flow cookie), the state in its Location altered.
        response = route.fetch(max_redirects=0)
        parts = urlsplit(response.headers["location"])
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        query["state"] += "-changed"
        location = urlunsplit(parts._replace(query=urlencode(query)))
        route.fulfill(response=response, headers={**response.headers, "location": location})

    page.route(re.compile(r".*/ui/sso/start(\?.*)?$"), tamper)
    sso_ui.goto("/ui/signin")
    with page.expect_navigation(url=re.compile(r".*/ui/sso/callback\?.*")) as navigation:
        page.get_by_role("link", name="Sign in with single sign-on").click()
    answer = navigation.value
    assert answer is not None and answer.status == 400
    sso_ui.check()
    assert "state does not match" in page.get_by_role("alert").inner_text()
    sso_ui.shot("sso-tampered-state")
    page.unroute(re.compile(r".*/ui/sso/start(\?.*)?$"))
    sso_ui.goto("/ui/prompts")
    assert "/ui/signin" in page.url  # not signed in
