"""The tool test-call page in a real browser (headless Chromium): fill the form made from the
tool's input schema, run it, watch progress arrive before the result; switch to raw JSON; stop a
call that would run on; and the same page with JavaScript off.

Every page is checked for console errors (a CSP violation is one) and by axe-core (``UiPage``).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    from playwright.sync_api import Browser, expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.ui.conftest import UiPage, UiServer, without_javascript
from tests.ui.test_tool_test_http import Hook, make_tool, running_hook

#: Records, in the page, when the first notification and the result were added to the document.
WATCH = """() => {
  window.__seen = {};
  new MutationObserver(() => {
    const now = performance.now();
    if (!window.__seen.note && document.querySelector('#test-notifications li')) { window.__seen.note = now; }
    if (!window.__seen.result && document.querySelector('#test-result .result-flag')) { window.__seen.result = now; }
  }).observe(document.body, {subtree: true, childList: true});
}"""


@pytest.fixture(scope="module")
def webhook() -> Iterator[Hook]:
    with running_hook() as running:
        yield running


def test_fill_the_generated_form_run_and_watch_progress_before_the_result(
    ui: UiPage, ui_server: UiServer, webhook: Hook
) -> None:
    name = make_tool(ui_server, webhook.url("/slow"))
    ui.sign_in(ui.server.editor_token)
    ui.goto(f"/ui/tools/{name}")
    ui.page.get_by_role("link", name="Test call…").click()
    ui.check()
    assert ui.page.url.endswith(f"/ui/tools/{name}/test")
    expect(ui.page.get_by_role("heading", level=1)).to_have_text(name)

    page = ui.page
    expect(page.get_by_label("Text (required) string")).to_have_value("hello")  # the default
    expect(page.get_by_label("Arguments as a JSON object")).to_be_hidden()  # the form is the default
    page.get_by_label("Text (required) string").fill("from the browser")
    page.get_by_label("mode").select_option("fast")
    page.get_by_label("count (required) integer").fill("5")
    page.get_by_label("loud").select_option(label="true")  # an optional boolean: a choice, not a checkbox
    page.get_by_label("tags").fill('["x", "y"]')
    ui.shot("tool-test-form")

    page.evaluate(WATCH)
    page.get_by_role("button", name="Run").click()
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    expect(page.locator("#test-notifications li").first).to_contain_text("1 / 3 — starting")
    assert page.locator("#test-result .result-flag").count() == 0, "progress shows while the webhook still works"
    page.locator("#test-output").scroll_into_view_if_needed()
    ui.shot("tool-test-running")

    expect(page.locator("#test-result .result-flag")).to_contain_text("isError: false", timeout=15_000)
    expect(page.get_by_role("status")).to_contain_text("Ran version 1 (production)")
    seen = page.evaluate("() => window.__seen")
    assert seen["note"] < seen["result"] - 500, seen  # the first progress came ~1.2 s before the result
    expect(page.locator("#test-result pre").first).to_have_text("done: from the browser")
    structured = page.get_by_label("Structured content")
    arguments = {"text": "from the browser", "mode": "fast", "count": 5, "loud": True, "tags": ["x", "y"]}
    assert json.loads(structured.inner_text()) == arguments
    levels = page.locator("#test-notifications .note-level").all_inner_texts()
    assert levels == ["progress", "info", "progress", "progress"]
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    expect(page.get_by_role("button", name="Run")).to_be_enabled()
    ui.check()
    page.get_by_role("heading", name="Result").scroll_into_view_if_needed()
    ui.shot("tool-test-result")

    # The raw JSON alternative starts from what the form holds.
    page.get_by_label("as raw JSON").check()
    raw = page.get_by_label("Arguments as a JSON object")
    expect(raw).to_be_visible()
    assert json.loads(raw.input_value()) == arguments
    raw.fill(json.dumps({"text": "raw", "count": 1}))
    page.get_by_role("button", name="Run").click()
    expect(page.locator("#test-result pre").first).to_have_text("done: raw", timeout=15_000)
    ui.check()


def test_invalid_arguments_are_an_error_result_and_a_bad_field_a_form_error(
    ui: UiPage, ui_server: UiServer, webhook: Hook
) -> None:
    name = make_tool(ui_server, webhook.url("/slow"))
    ui.sign_in(ui.server.editor_token)
    ui.goto(f"/ui/tools/{name}/test")
    page = ui.page
    page.get_by_label("count (required) integer").fill("42")
    page.get_by_role("button", name="Run").click()
    flag = page.locator("#test-result .result-flag")
    expect(flag).to_contain_text("isError: true", timeout=15_000)
    expect(page.locator("#test-result pre").first).to_contain_text("42 is greater than the maximum of 10")
    ui.check()
    ui.shot("tool-test-invalid-arguments")

    # Raw JSON that is not JSON: the stream is not started, the form comes back with the error.
    page.get_by_label("as raw JSON").check()
    page.get_by_label("Arguments as a JSON object").fill("{not json")
    page.get_by_role("button", name="Run").click()
    expect(page.get_by_role("alert")).to_contain_text("The JSON arguments: not valid JSON")
    ui.check()
    expect(page.get_by_label("as raw JSON")).to_be_checked()
    expect(page.get_by_label("Arguments as a JSON object")).to_have_value("{not json")


def test_stop_cancels_a_running_call(ui: UiPage, ui_server: UiServer, webhook: Hook) -> None:
    name = make_tool(ui_server, webhook.url("/forever?key=browser-stop"), schema={"type": "object"}, timeout_s=120)
    ui.sign_in(ui.server.editor_token)
    ui.goto(f"/ui/tools/{name}/test")
    page = ui.page
    expect(page.get_by_label("as raw JSON")).to_be_checked()  # no properties: raw JSON by default
    page.get_by_role("button", name="Run").click()
    expect(page.locator("#test-notifications li").nth(2)).to_contain_text("tick 3")
    page.get_by_role("button", name="Stop").click()
    expect(page.get_by_role("status")).to_have_text("Stopped: the call was cancelled.")
    assert webhook.state.closed_event("browser-stop").wait(10), "the webhook call goes on after Stop"
    ui.check()


def test_without_javascript_the_form_posts_and_shows_the_result(
    browser: Browser, ui_server: UiServer, axe_source: str, screenshot_dir: Path, webhook: Hook
) -> None:
    name = make_tool(ui_server, webhook.url("/slow"))
    with without_javascript(browser, ui_server, axe_source, screenshot_dir, ui_server.editor_token) as ui:
        ui.goto(f"/ui/tools/{name}/test", check=False)
        page = ui.page
        page.get_by_label("Text (required) string").fill("no script")
        page.get_by_role("button", name="Run").click()
        page.wait_for_load_state("load")
        expect(page.get_by_role("status")).to_have_text("Ran version 1 (production).")
        expect(page.locator("#test-result pre").first).to_have_text("done: no script")
        assert page.locator("#test-notifications li").count() == 4
        page.get_by_role("heading", name="Result").scroll_into_view_if_needed()
        ui.shot("tool-test-no-javascript")
        assert not ui.errors, ui.errors


#: A tool with a required string, an optional boolean and an optional integer (issue 25, item 9).
OPTIONAL_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "title": "Query"},
        "strict": {"type": "boolean", "title": "Strict", "description": "Match exactly"},
        "limit": {"type": "integer", "title": "Limit"},
    },
    "required": ["query"],
}


def test_a_required_string_left_empty_is_refused_and_an_optional_boolean_can_be_left_out(
    ui: UiPage, ui_server: UiServer, webhook: Hook
) -> None:
    key = secrets.token_hex(4)
    name = make_tool(ui_server, webhook.url(f"/record?key={key}"), schema=OPTIONAL_SCHEMA)
    ui.sign_in(ui.server.editor_token)
    ui.goto(f"/ui/tools/{name}/test")
    page = ui.page
    query = page.get_by_label("Query (required) string")
    strict = page.get_by_label("Strict boolean")
    expect(strict).to_have_value("")  # "leave out" unless chosen
    expect(strict.locator("option:checked")).to_have_text("(leave out)")

    # The required string left empty: refused at the field, focused, and nothing is sent.
    page.get_by_role("button", name="Run").click()
    expect(page.get_by_role("alert")).to_contain_text("nothing was sent")
    expect(query).to_have_attribute("aria-invalid", "true")
    expect(query).to_have_accessible_description(
        "Query: required: type a value, or tick “send an empty string” to send one"
    )
    expect(query).to_be_focused()
    ui.check()
    ui.shot("tool-test-required-refused")
    assert webhook.state.received.get(key) is None, "a form with a required field left empty was sent"

    def run_and_receive(expected: dict[str, object]) -> None:
        calls = len(webhook.state.received.get(key, []))
        page.get_by_role("button", name="Run").click()
        expect(page.locator("#test-result pre").first).to_have_text(json.dumps(expected, sort_keys=True))
        assert webhook.state.received[key][calls:] == [expected]

    # Filled in, the boolean left out: the webhook gets the string only (no false, no 0).
    query.fill("refunds")
    run_and_receive({"query": "refunds"})
    expect(page.get_by_role("alert")).to_have_count(0)
    expect(query).not_to_have_attribute("aria-invalid", "true")
    # false, chosen: sent as false.
    strict.select_option(label="false")
    run_and_receive({"query": "refunds", "strict": False})
    strict.select_option(label="true")
    page.get_by_label("Limit integer").fill("0")
    run_and_receive({"query": "refunds", "strict": True, "limit": 0})
    # An empty string, asked for explicitly.
    query.fill("")
    page.get_by_label("Query: send an empty string when left empty").check()
    strict.select_option(label="(leave out)")
    page.get_by_label("Limit integer").fill("")
    run_and_receive({"query": ""})
    ui.check()


def test_without_javascript_a_required_string_left_empty_is_refused_by_the_server(
    browser: Browser, ui_server: UiServer, axe_source: str, screenshot_dir: Path, webhook: Hook
) -> None:
    key = secrets.token_hex(4)
    name = make_tool(ui_server, webhook.url(f"/record?key={key}"), schema=OPTIONAL_SCHEMA)
    with without_javascript(browser, ui_server, axe_source, screenshot_dir, ui_server.editor_token) as ui:
        ui.goto(f"/ui/tools/{name}/test", check=False)
        page = ui.page
        page.get_by_label("Strict boolean").select_option(label="false")
        page.get_by_role("button", name="Run").click()
        page.wait_for_load_state("load")
        expect(page.get_by_role("alert")).to_contain_text("nothing was sent")
        expect(page.locator("#arg-0-error")).to_have_text(
            "Query: required: type a value, or tick “send an empty string” to send one"
        )
        expect(page.get_by_label("Strict boolean")).to_have_value("1")  # what was chosen is kept
        assert webhook.state.received.get(key) is None
        page.get_by_label("Query (required) string").fill("no script")
        page.get_by_role("button", name="Run").click()
        page.wait_for_load_state("load")
        expect(page.locator("#test-result pre").first).to_have_text(
            json.dumps({"query": "no script", "strict": False}, sort_keys=True)
        )
        assert webhook.state.received[key] == [{"query": "no script", "strict": False}]
        # The refusal is a 400 page, which Chromium logs as a failed load: nothing else may be logged.
        assert [e for e in ui.errors if "status of 400" not in e] == [], ui.errors
