"""The prompt editor in a real browser: creating and editing as a person would, the live checks
and preview while typing, what agents receive afterwards, and two people editing one prompt."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.http import TLS
from tests.interop.mcp_wire import iter_sse
from tests.ui.conftest import UiPage, UiServer, fill_template
from tests.waiting import wait_until


@contextmanager
def mcp_listener(server: UiServer) -> Iterator[list[dict[str, Any]]]:
    """An MCP session with its GET stream open; yields the notifications it receives."""
    client = server.mcp()
    received: list[dict[str, Any]] = []
    opened = threading.Event()
    stop = threading.Event()

    def listen() -> None:
        headers = {**client.headers(), "Accept": "text/event-stream"}
        with (
            httpx.Client(base_url=server.url, timeout=httpx.Timeout(5, read=None), verify=TLS) as http,
            http.stream("GET", "/mcp", headers=headers) as stream,
        ):
            assert stream.status_code == 200
            opened.set()
            for event in iter_sse(stream.iter_lines()):
                if event.data:
                    received.append(json.loads(event.data))
                if stop.is_set():
                    return

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    assert opened.wait(10), "the MCP stream did not open"
    try:
        yield received
    finally:
        stop.set()
        client.http.close()


def test_create_then_edit_a_prompt_with_live_checks_and_preview(ui: UiPage, ui_server: UiServer) -> None:
    name = f"browser-made-{time.monotonic_ns()}"
    ui.sign_in(ui_server.editor_token)
    ui.goto("/ui/prompts")
    ui.page.get_by_role("link", name="New prompt").click()
    ui.check()
    page = ui.page
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Title", exact=True).fill("Made in a browser")
    page.get_by_label("Description", exact=True).fill("First description")
    page.get_by_role("button", name="Add argument").click()
    ui.check()
    assert page.get_by_label("Name", exact=True).input_value() == name, "the row button keeps what was typed"
    page.get_by_label("Argument 1 name").fill("who")
    page.get_by_label("Argument 1 required").check()
    fill_template(page, "msg-0-text", "Hello {{ who }}")
    expect(page.locator("#check-results")).to_contain_text("No problems", timeout=10_000)
    page.get_by_role("button", name="Create").click()
    ui.check()
    expect(page.get_by_role("status").first).to_contain_text(f"Created {name} v1")
    assert ui_server.prompt_text(name, {"who": "Ada"}) == "Hello Ada"

    with mcp_listener(ui_server) as notifications:
        page.get_by_role("link", name="Edit", exact=True).click()
        ui.check()
        fill_template(page, "msg-0-text", "Good day,\n{{ who ")
        expect(page.locator("#check-results")).to_contain_text("Message 1, line 2", timeout=10_000)
        fill_template(page, "msg-0-text", "Good day, {{ who }}.\nSee {{ whom }}")
        issues = page.get_by_role("list", name="Problems")
        expect(issues).to_contain_text("whom", timeout=10_000)
        expect(issues).to_contain_text("line 2")
        ui.shot("prompt-editor-problem")
        page.get_by_label("Description", exact=True).fill("Second description")
        fill_template(page, "msg-0-text", "Good day, {{ who }}.\n{% if who == 'Ada' %}Welcome back!{% endif %}")
        expect(page.locator("#check-results")).to_contain_text("No problems", timeout=10_000)
        page.get_by_label("who", exact=True).fill("Ada")
        preview = page.get_by_label("Rendered message 1")
        expect(preview).to_have_text("Good day, Ada.\nWelcome back!", timeout=10_000)
        ui.shot("prompt-editor")
        page.get_by_label("Show the raw JSON-RPC result").check()
        raw = page.get_by_role("group", name="Raw JSON-RPC result")
        expect(raw).to_contain_text('"jsonrpc": "2.0"', timeout=10_000)
        ui.check()
        ui.shot("prompt-editor-raw")
        previewed = json.loads(raw.inner_text())

        page.get_by_label("Change note").fill("friendlier greeting")
        page.get_by_role("button", name="Save version 2").click()
        ui.check()
        expect(page.get_by_role("status").first).to_contain_text(f"Saved {name} v2")
        wait_until(
            lambda: any(n.get("method") == "notifications/prompts/list_changed" for n in notifications),
            lambda: f"notifications/prompts/list_changed (notifications so far: {notifications})",
        )

    client = ui_server.mcp()
    try:
        served = client.request("prompts/get", {"name": name, "arguments": {"who": "Ada"}})
    finally:
        client.http.close()
    assert served["result"] == previewed["result"], "the preview is exactly what prompts/get returns"
    assert served["result"]["messages"][0]["content"]["text"] == "Good day, Ada.\nWelcome back!"


def test_two_people_editing_one_prompt_see_the_banner_then_the_conflict(
    ui: UiPage, second_ui: UiPage, ui_server: UiServer
) -> None:
    name = ui_server.create_prompt("Hello {{ who }}")
    ui.sign_in(ui_server.editor_token)
    second_ui.sign_in(ui_server.admin_token)
    ui.goto(f"/ui/prompts/{name}/edit")
    second_ui.goto(f"/ui/prompts/{name}/edit")
    banner = ui.page.locator("#live-banner")
    expect(banner).to_be_hidden()

    # The other person saves first.
    fill_template(second_ui.page, "msg-0-text", "Their text for {{ who }}")
    second_ui.page.get_by_label("Change note").fill("their edit")
    second_ui.page.get_by_role("button", name="Save version 2").click()
    second_ui.check()

    expect(banner).to_be_visible(timeout=10_000)
    expect(banner).to_contain_text("saved version 2")
    expect(banner).to_contain_text("their edit")
    ui.shot("editor-live-banner")

    # I had typed meanwhile; my save is refused and my text is kept.
    mine = "My own words for {{ who }}"
    fill_template(ui.page, "msg-0-text", mine)
    ui.page.get_by_label("Title", exact=True).fill("My title")
    ui.page.get_by_role("button", name="Save version 2").click()
    ui.check()
    expect(
        ui.page.get_by_role("heading", level=2, name="saved version 2 while you were editing version 1")
    ).to_be_visible()
    assert ui.page.locator("#msg-0-text").input_value() == mine
    assert ui.page.get_by_label("Title", exact=True).input_value() == "My title"
    expect(ui.page.locator("#theirs-messages")).to_contain_text("Their text for")
    ui.shot("editor-conflict")
    assert ui_server.prompt_text(name, {"who": "Ada"}) == "Their text for Ada"

    ui.page.get_by_role("button", name="Save mine on top of v2").click()
    ui.check()
    expect(ui.page.get_by_role("status").first).to_contain_text(f"Saved {name} v3")
    assert ui_server.prompt_text(name, {"who": "Ada"}) == "My own words for Ada"


def test_the_editor_works_with_javascript_off(browser: Any, ui_server: UiServer, axe_source: str) -> None:
    context = browser.new_context(java_script_enabled=False, viewport={"width": 1366, "height": 860})
    try:
        page = context.new_page()
        page.goto(ui_server.url + "/ui/signin")
        page.get_by_label("API token").fill(ui_server.editor_token)
        page.get_by_role("button", name="Sign in").click()
        name = ui_server.create_prompt("Hello {{ who }}")
        page.goto(ui_server.url + f"/ui/prompts/{name}/edit")
        page.locator("#msg-0-text").fill("Hi {{ who }}, {{ nobody }}")
        page.get_by_role("button", name="Check and preview").click()
        expect(page.get_by_role("list", name="Problems")).to_contain_text("nobody")
        page.get_by_label("who", exact=True).fill("Ada")  # the sample fields stay after a check
        page.get_by_label("Title", exact=True).press("Enter")  # Enter runs a check, not a row button or a save
        expect(page.get_by_role("list", name="Problems")).to_contain_text("nobody")
        assert page.get_by_label("who", exact=True).input_value() == "Ada"
        expect(page.locator("#msg-0-text")).to_have_value("Hi {{ who }}, {{ nobody }}")
        page.locator("#msg-0-text").fill("Hi {{ who }}!")
        page.get_by_role("button", name="Save version 2").click()
        expect(page.get_by_role("status").first).to_contain_text("v2")
        assert ui_server.prompt_text(name, {"who": "Ada"}) == "Hi Ada!"
    finally:
        context.close()
