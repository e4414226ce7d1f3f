"""Fixtures for the web UI tests: a real server, Debian's Chromium driven by Playwright, axe-core.

Nothing is downloaded here: the browser is the system's ``chromium`` (``.ci/run`` apt-installs it),
Playwright is the pinned Python package, and axe-core comes from ``tests/ui/node`` (installed by
``tests/interop/setup_node_tools.sh``). When one of them is missing the tests skip saying which,
except under ``CI=true``, where they fail.

``UiPage`` wraps a Playwright page: every page it visits must raise no page error and log no
console error (a Content-Security-Policy violation is one), and axe-core must find no critical or
serious accessibility violation on it. ``shot(name)`` saves a screenshot into the run's
screenshot folder (``UI_SCREENSHOT_DIR``, else a temporary folder, printed at the end).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient, list_all, open_session, served_prompt_text
from tests.serve_process import ServerProcess, issue_token

HERE = Path(__file__).resolve().parent
AXE = HERE / "node" / "node_modules" / "axe-core" / "axe.min.js"
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
#: axe-core impacts that fail a page.
BLOCKING_IMPACTS = ("critical", "serious")

try:  # imported lazily so that the rest of the suite runs without Playwright
    from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Playwright, sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None  # type: ignore[assignment]


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI must run the browser tests)")
    pytest.skip(reason)


def chromium_path() -> str | None:
    for candidate in CHROMIUM_CANDIDATES:
        if Path(candidate).exists():
            return candidate
    return shutil.which("chromium")


# ------------------------------------------------------------------ server and tokens


class UiServer:
    """The server under test, with a token per scope (values) and HTTP helpers."""

    def __init__(self, process: ServerProcess) -> None:
        self.process = process
        self.url = process.url
        self.admin_token = process.admin_token
        with process.admin() as admin:
            self.editor_token = issue_token(admin, "ui-editor", ["editor"])["token"]
            self.viewer_token = issue_token(admin, "ui-viewer", ["viewer"])["token"]

    def admin(self) -> httpx.Client:
        return self.process.admin()

    def issue(self, name: str, scopes: list[str]) -> dict[str, Any]:
        """A new token named ``name`` (a person: a later token of that name is the same one):
        its record, with the value under ``token``."""
        with self.admin() as admin:
            return issue_token(admin, name, scopes)

    def revoke(self, token_id: int) -> None:
        """Revoke a token through the admin API (its web UI sessions end at once)."""
        with self.admin() as admin:
            answer = admin.delete(f"/api/v1/tokens/{token_id}")
            assert answer.status_code == 200, answer.text

    def mcp(self, token: str | None = None) -> StreamableHttpClient:
        """An initialized MCP session (anonymous, or with ``token``)."""
        return open_session(self.url, token)

    def prompt_text(self, name: str, arguments: dict[str, str]) -> str:
        """What ``prompts/get`` serves now (the production label), as the first message's text."""
        return served_prompt_text(self.url, name, arguments)

    def prompt_names(self) -> set[str]:
        client = self.mcp()
        try:
            return {p["name"] for p in list_all(client, "prompts/list", "prompts")}
        finally:
            client.http.close()

    def create_prompt(
        self,
        template: str,
        *,
        versions: tuple[str, ...] = (),
        prefix: str = "ui-probe",
        title: str = "UI probe",
        arguments: list[dict[str, Any]] | None = None,
    ) -> str:
        """A new prompt (a fresh name) with ``template`` as v1 and each of ``versions`` saved after it;
        its ``arguments`` (as the API takes them) default to one required ``who``."""
        name = f"{prefix}-{secrets.token_hex(4)}"
        spec: dict[str, Any] = {
            "name": name,
            "title": title,
            "description": "A prompt the web UI tests change",
            "tags": ["ui-test"],
            "arguments": arguments
            if arguments is not None
            else [{"name": "who", "description": "whom to greet", "required": True}],
        }
        with self.admin() as admin:
            created = admin.post("/api/v1/prompts", json={**spec, "template": template, "change_note": "first"})
            assert created.status_code == 201, created.text
            for number, text in enumerate(versions, start=2):
                saved = admin.put(
                    f"/api/v1/prompts/{name}", json={**spec, "template": text, "change_note": f"edit {number}"}
                )
                assert saved.status_code == 200, saved.text
        return name

    def create_prompts(self, names: list[str], *, tags: tuple[str, ...] = ("ui-test",)) -> None:
        """Many small prompts at once (one v1 each, served at production), on one connection."""
        with self.admin() as admin:
            for name in names:
                spec = {
                    "name": name,
                    "title": f"Prompt {name}",
                    "description": "A prompt of a long list",
                    "tags": list(tags),
                    "arguments": [{"name": "who", "required": True}],
                    "template": "Hello {{ who }}.",
                }
                created = admin.post("/api/v1/prompts", json=spec)
                assert created.status_code == 201, created.text

    def use_prompt(self, name: str, times: int = 1) -> None:
        """Call ``prompts/get`` on ``name`` ``times`` times (as an agent: the uses are counted)."""
        client = self.mcp()
        try:
            for _ in range(times):
                answer = client.request("prompts/get", {"name": name, "arguments": {"who": "you"}})
                assert "result" in answer, answer
        finally:
            client.http.close()


@pytest.fixture(scope="package")
def ui_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    """One ``mcp-registry serve`` (SQLite, demo catalog) for every UI test; tests make their own entries."""
    data = tmp_path_factory.mktemp("ui-server") / "data"
    # Loopback webhooks are allowed (a tool test makes one); X-Forwarded-Proto is believed from
    # loopback, as from a TLS-terminating proxy (the Secure cookie test).
    env = {"REGISTRY_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8", "REGISTRY_FORWARDED_ALLOW_IPS": "127.0.0.1"}
    with ServerProcess(data, name="ui-registry", env=env) as process:
        yield UiServer(process)


@pytest.fixture
def guarded_label(ui_server: UiServer) -> Iterator[str]:
    """A label of its own, protected for the test (the shared server's production stays open)."""
    label = f"guarded-{secrets.token_hex(3)}"
    with ui_server.admin() as admin:
        protected = admin.put(f"/api/v1/protected-labels/{label}", json={})
        assert protected.status_code == 200, protected.text
    try:
        yield label
    finally:
        with ui_server.admin() as admin:
            admin.delete(f"/api/v1/protected-labels/{label}")


# ------------------------------------------------------------------ HTTP-level helpers

NONCE = re.compile(r'name="signin_nonce" value="([^"]+)"')
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def sign_in(http: httpx.Client, token: str) -> httpx.Response:
    """Sign in through the form, as a browser does (the answer is a 303 to the home page)."""
    form = http.get("/ui/signin")
    match = NONCE.search(form.text)
    assert match, form.text
    return http.post("/ui/signin", data={"token": token, "signin_nonce": match.group(1), "next": "/ui/"})


def csrf_of(http: httpx.Client, path: str) -> str:
    """The CSRF token on the page at ``path`` (which must answer 200)."""
    page = http.get(path)
    assert page.status_code == 200, page.text[:500]
    match = CSRF.search(page.text)
    assert match
    return match.group(1)


@pytest.fixture
def editor(ui_server: UiServer) -> Iterator[httpx.Client]:
    """An HTTP client signed in with the editor token."""
    with httpx.Client(base_url=ui_server.url, timeout=30, verify=TLS) as http:
        assert sign_in(http, ui_server.editor_token).status_code == 303
        yield http


# ------------------------------------------------------------------ browser


@pytest.fixture(scope="session")
def axe_source() -> str:
    if not AXE.is_file():
        _missing(f"axe-core is not installed at {AXE} (run: bash tests/interop/setup_node_tools.sh)")
    return AXE.read_text(encoding="utf-8")


# Package scope: Playwright's sync API runs an event loop in this thread until it is stopped, and
# later tests that start their own loop (pytest-asyncio) must not find one running.
@pytest.fixture(scope="package")
def playwright_instance() -> Iterator[Playwright]:
    if sync_playwright is None:
        _missing("playwright is not installed (pip install -e '.[test]')")
    # Assertions wait up to 10 s (Playwright's default is 5): the CI machines have 2 shared cores,
    # and a page that renders late is not a page that is wrong.
    from playwright.sync_api import expect

    expect.set_options(timeout=10_000)
    with sync_playwright() as instance:
        yield instance


@pytest.fixture(scope="package")
def browser(playwright_instance: Playwright) -> Iterator[Browser]:
    executable = chromium_path()
    if executable is None:
        _missing("Debian's chromium is not installed (apt-get install chromium)")
    launched = playwright_instance.chromium.launch(executable_path=executable, args=["--no-sandbox"])
    yield launched
    launched.close()


_SHOTS: list[Path] = []


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    configured = os.environ.get("UI_SCREENSHOT_DIR")
    folder = Path(configured) if configured else tmp_path_factory.mktemp("ui-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    _SHOTS.append(folder)
    return folder


class UiPage:
    """A browser tab on the server under test that checks each page it lands on."""

    def __init__(self, context: BrowserContext, server: UiServer, axe: str, shots: Path) -> None:
        self.context = context
        self.server = server
        self.axe = axe
        self.shots = shots
        self.page: Page = context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))
        self.page.on("console", self._console)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"console error: {message.text}")

    def url(self, path: str) -> str:
        return self.server.url + path

    def goto(self, path: str, *, status: int = 200, check: bool = True) -> Page:
        response = self.page.goto(self.url(path))
        assert response is not None
        assert response.status == status, f"{path}: HTTP {response.status}, wanted {status}"
        if check:
            self.check()
        return self.page

    def check(self) -> None:
        """No page error, no console error, no serious accessibility violation on the current page."""
        self.page.wait_for_load_state("load")
        where = self.page.url
        errors, self.errors = self.errors, []
        # A 4xx answer is logged by Chromium as a failed resource load: the page itself is what we check.
        errors = [
            e
            for e in errors
            if not re.search(r"Failed to load resource: the server responded with a status of 4\d\d", e)
        ]
        # htmx logs a request it aborted on purpose (the live check's ``hx-sync="this:replace"``: a newer
        # edit supersedes the check in flight, which a loaded machine makes likelier) as two console
        # errors, ``htmx:sendAbort`` and its ``htmx:afterRequest``. Those pairs are not faults; a failed
        # send (``htmx:sendError``) or an ``htmx:afterRequest`` without an abort still is.
        aborts = sum(1 for e in errors if e.startswith("console error: htmx:sendAbort"))
        errors = [e for e in errors if not e.startswith("console error: htmx:sendAbort")]
        for _ in range(aborts):
            paired = next((e for e in errors if e.startswith("console error: htmx:afterRequest")), None)
            if paired is not None:
                errors.remove(paired)
        assert not errors, f"{where}: {errors}"
        if not self.page.evaluate("() => typeof window.axe !== 'undefined'"):
            self.page.evaluate(self.axe)
        result = self.page.evaluate(
            "async () => { const r = await axe.run(document, {resultTypes: ['violations']}); "
            "return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help, "
            "nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})); }"
        )
        blocking = [v for v in result if v["impact"] in BLOCKING_IMPACTS]
        assert not blocking, f"{where}: accessibility violations: {blocking}"

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=False)
        return path

    def sign_in(self, token: str, *, next_path: str | None = None) -> None:
        self.goto("/ui/signin" + (f"?next={next_path}" if next_path else ""))
        self.page.get_by_label("API token").fill(token)
        self.page.get_by_role("button", name="Sign in").click()
        self.page.wait_for_load_state("load")
        assert "/ui/signin" not in self.page.url, self.page.content()[:2000]
        self.check()

    def csrf_token(self) -> str:
        value = self.page.locator('input[name="csrf_token"]').first.get_attribute("value")
        assert value
        return value


@contextmanager
def without_javascript(browser: Browser, server: UiServer, axe: str, shots: Path, token: str) -> Iterator[UiPage]:
    """A tab of a fresh browser context with JavaScript off, signed in with ``token`` through the
    sign-in form (the page is not checked: ``check`` it where the test wants)."""
    context = browser.new_context(java_script_enabled=False, viewport={"width": 1366, "height": 860})
    try:
        ui = UiPage(context, server, axe, shots)
        ui.goto("/ui/signin", check=False)
        ui.page.get_by_label("API token").fill(token)
        ui.page.get_by_role("button", name="Sign in").click()
        yield ui
    finally:
        context.close()


def fill_template(page: Page, field_id: str, text: str) -> None:
    """Replace the text of the template field ``textarea#field_id`` as a person would: in the code
    editor drawn in front of it (the textarea is hidden and follows it), or, with JavaScript off,
    in the textarea itself. Waits until the textarea (what the form posts) holds ``text``."""
    from playwright.sync_api import expect

    textarea = page.locator(f"#{field_id}")
    if textarea.get_attribute("data-code-editor-on") is None:
        textarea.fill(text)
        return
    content = page.locator(f"#{field_id} + .cm-editor .cm-content")
    content.click()
    page.keyboard.press("ControlOrMeta+a")
    if text:
        # One insertion, as a paste would be: typed key by key, brackets would be closed for us.
        page.keyboard.insert_text(text)
    else:
        page.keyboard.press("Delete")
    expect(textarea).to_have_value(text)


@pytest.fixture
def ui(browser: Browser, ui_server: UiServer, axe_source: str, screenshot_dir: Path) -> Iterator[UiPage]:
    """A fresh browser context (no cookies) at a laptop's window size."""
    context = browser.new_context(viewport={"width": 1366, "height": 860})
    try:
        yield UiPage(context, ui_server, axe_source, screenshot_dir)
    finally:
        context.close()


@pytest.fixture
def second_ui(browser: Browser, ui_server: UiServer, axe_source: str, screenshot_dir: Path) -> Iterator[UiPage]:
    """Another person's browser (its own cookies)."""
    context = browser.new_context(viewport={"width": 1366, "height": 860})
    try:
        yield UiPage(context, ui_server, axe_source, screenshot_dir)
    finally:
        context.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for folder in _SHOTS:
        terminalreporter.write_line(f"web UI screenshots: {folder}")
