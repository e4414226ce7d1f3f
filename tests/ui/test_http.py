"""The web UI at the HTTP level (no browser): headers, cookies, CSRF, redirects, body limits."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from registry.ui.security import CONTENT_SECURITY_POLICY
from tests.http import TLS
from tests.ui.conftest import CSRF, NONCE, UiServer, sign_in


def test_every_page_has_a_strict_csp_and_no_inline_script_or_style(editor: httpx.Client) -> None:
    assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY and "'unsafe-eval'" not in CONTENT_SECURITY_POLICY
    for path in (
        "/ui/",
        "/ui/prompts",
        "/ui/prompts/summarize",
        "/ui/prompts/summarize/history",
        "/ui/prompts/summarize/diff?from=1&to=1",
        "/ui/prompts/summarize/promote?version=1",
        "/ui/tools/echo",
        "/ui/resources",
        "/ui/activity",
        "/ui/nowhere",
    ):
        page = editor.get(path)
        assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, path
        assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["cache-control"] == "no-store", path
        html = page.text
        assert re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html) is None, f"{path}: inline script"
        assert re.search(r"<style\b", html) is None, f"{path}: inline style element"
        assert re.search(r"\sstyle=", html) is None, f"{path}: style attribute"
        assert re.search(r"\son[a-z]+=", html) is None, f"{path}: inline event handler"
        for asset in re.findall(r'(?:src|href)="(/ui/static/[^"]+)"', html):
            assert editor.get(asset).status_code == 200, asset


def test_api_reference_assets_stay_where_docs_and_redoc_load_them(ui_server: UiServer) -> None:
    with httpx.Client(base_url=ui_server.url, verify=TLS) as http:
        for path in (
            "/ui/vendor/swagger-ui/swagger-ui.css",
            "/ui/vendor/redoc/redoc.standalone.js",
            "/ui/docs/swagger-init.js",
            "/ui/docs/redoc-init.js",
        ):
            assert http.get(path).status_code == 200, path
        assert "swagger-ui" in http.get("/docs").text


def test_sign_in_sets_an_httponly_samesite_cookie_secure_behind_https(ui_server: UiServer) -> None:
    with httpx.Client(base_url=ui_server.url, verify=TLS) as http:
        answer = sign_in(http, ui_server.viewer_token)
        cookie = answer.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=lax" in cookie and "path=/ui" in cookie
        assert "secure" not in cookie
    with httpx.Client(base_url=ui_server.url, verify=TLS) as http:
        # The server trusts X-Forwarded-Proto from loopback (REGISTRY_FORWARDED_ALLOW_IPS in conftest).
        https = {"X-Forwarded-Proto": "https"}
        form = http.get("/ui/signin", headers=https)
        assert "secure" in form.headers["set-cookie"].lower()  # the sign-in form's own cookie too
        nonce = NONCE.search(form.text)
        assert nonce
        answer = http.post(  # httpx keeps Secure cookies for https: hand the form's cookie back ourselves
            "/ui/signin",
            data={"token": ui_server.viewer_token, "signin_nonce": nonce.group(1), "next": "/ui/"},
            headers={**https, "Cookie": f"mcpr_ui_signin={nonce.group(1)}"},
        )
        assert answer.status_code == 303, answer.text
        assert "secure" in answer.headers["set-cookie"].lower()


def test_the_sign_in_form_has_its_own_csrf_token(ui_server: UiServer) -> None:
    with httpx.Client(base_url=ui_server.url, verify=TLS) as http:
        forged = http.post("/ui/signin", data={"token": ui_server.admin_token, "next": "/ui/"})
        assert forged.status_code == 400
        assert "mcpr_ui_session" not in forged.headers.get("set-cookie", "")
        assert "expired" in forged.text


@pytest.mark.parametrize("target", ["//evil.example/", "https://evil.example/", "/\\evil.example", "/elsewhere"])
def test_after_sign_in_the_browser_stays_on_the_ui(ui_server: UiServer, target: str) -> None:
    with httpx.Client(base_url=ui_server.url, verify=TLS) as http:
        nonce = NONCE.search(http.get("/ui/signin").text)
        assert nonce
        answer = http.post(
            "/ui/signin", data={"token": ui_server.viewer_token, "signin_nonce": nonce.group(1), "next": target}
        )
        assert answer.status_code == 303 and answer.headers["location"] == "/ui/"


def test_pages_need_a_session_and_htmx_is_told_where_to_sign_in(ui_server: UiServer) -> None:
    with httpx.Client(base_url=ui_server.url, verify=TLS) as http:
        page = http.get("/ui/prompts?q=x")
        assert page.status_code == 303 and page.headers["location"].startswith("/ui/signin?next=%2Fui%2Fprompts")
        # htmx is not redirected (that would throw away the page): a 401 names the sign-in page,
        # coming back to the page the request was sent from; ui.js goes there.
        partial = http.get(
            "/ui/prompts", headers={"HX-Request": "true", "HX-Current-URL": f"{ui_server.url}/ui/prompts?q=x"}
        )
        assert partial.status_code == 401 and "hx-redirect" not in partial.headers
        assert partial.headers["x-sign-in"] == "/ui/signin?next=%2Fui%2Fprompts%3Fq%3Dx"
        assert "Sign in again" in partial.text and "<html" not in partial.text
        stale = http.get("/ui/", headers={"Cookie": "mcpr_ui_session=not-a-session"})
        assert "ended=1" in stale.headers["location"]


def test_htmx_gets_just_the_results(editor: httpx.Client) -> None:
    partial = editor.get("/ui/prompts?q=summar", headers={"HX-Request": "true"})
    assert partial.status_code == 200
    assert partial.text.lstrip().startswith('<div id="results">') and "<html" not in partial.text
    assert "summarize" in partial.text and "code-review" not in partial.text


def test_an_oversized_form_is_refused_naming_the_limit(editor: httpx.Client) -> None:
    page = editor.get("/ui/prompts/summarize/archive")
    csrf = CSRF.search(page.text)
    assert csrf
    big = b"csrf_token=" + csrf.group(1).encode() + b"&pad=" + b"a" * (4 * 1024 * 1024 + 10)
    declared = editor.post(
        "/ui/prompts/summarize/archive", content=big, headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert declared.status_code == 413 and "REGISTRY_LIMIT_BODY_BYTES" in declared.text

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it is read
        for start in range(0, len(big), 64 * 1024):
            yield big[start : start + 64 * 1024]

    streamed = editor.post(
        "/ui/prompts/summarize/archive", content=chunks(), headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert streamed.status_code == 413 and "REGISTRY_LIMIT_BODY_BYTES" in streamed.text
    assert "archived" not in editor.get("/ui/prompts/summarize").text.split("<main", 1)[1].split("</h1>")[0]


def test_list_pages_past_the_end_and_bad_filters_say_so(editor: httpx.Client) -> None:
    past = editor.get("/ui/prompts?page=999")
    assert past.status_code == 200 and "There is no page 999" in past.text
    too_long = editor.get("/ui/prompts", params={"q": "x" * 300})
    assert too_long.status_code == 400 and "REGISTRY_LIMIT_SEARCH_CHARS" in too_long.text
    bad_page = editor.get("/ui/prompts?page=0")
    assert bad_page.status_code == 400 and "page" in bad_page.text
