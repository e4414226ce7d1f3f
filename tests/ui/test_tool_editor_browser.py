"""The tool editor in a real browser: breaking and fixing the input schema while typing (the live
panel follows), the secret control, adding a header row, saving, and what agents list afterwards."""

from __future__ import annotations

import json
import os
import secrets
from typing import Any

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.interop.mcp_wire import list_all
from tests.ui.conftest import UiPage, UiServer

SECRET = "browser-secret-" + secrets.token_hex(8)
SCHEMA: dict[str, Any] = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def make_tool(server: UiServer) -> str:
    name = f"ui-browser-tool-{secrets.token_hex(4)}"
    body = {
        "name": name,
        "title": "Weather",
        "description": "Tells the weather",
        "inputSchema": SCHEMA,
        "webhook": {
            "url": "http://127.0.0.1:9/hook",  # never called here
            "headers": {"Authorization": "Bearer browser-" + secrets.token_hex(4), "X-Team": "payments"},
            "secret": SECRET,
        },
    }
    with server.admin() as admin:
        created = admin.post("/api/v1/tools", json=body)
        assert created.status_code == 201, created.text
    return name


def test_edit_a_tool_schema_with_live_checks_then_add_a_header_and_save(ui: UiPage, ui_server: UiServer) -> None:
    name = make_tool(ui_server)
    ui.sign_in(ui_server.editor_token)
    ui.goto(f"/ui/tools/{name}")
    page = ui.page
    page.get_by_role("link", name="Edit", exact=True).click()
    ui.check()
    assert SECRET not in page.content()
    results = page.locator("#check-results")
    expect(results).to_contain_text("No problems", timeout=10_000)

    schema = page.get_by_label("Input schema", exact=True)
    schema.fill('{\n  "type": "object",\n  "properties": {\n    "city": {"type": "string"}\n')
    problems = page.get_by_role("list", name="Problems")
    expect(problems).to_contain_text("Input schema: not valid JSON: line 5", timeout=10_000)
    schema.fill('{"type": "object", "properties": {"city": {"type": "strng"}}}')
    expect(problems).to_contain_text("not a valid JSON Schema 2020-12 at properties/city/type", timeout=10_000)
    ui.check()
    ui.shot("tool-editor-problem")

    fixed = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
        "required": ["city"],
    }
    schema.fill(json.dumps(fixed, indent=2))
    expect(results).to_contain_text("No problems", timeout=10_000)
    expect(page.get_by_role("group", name="tools/list item")).to_contain_text('"days"')

    # The secret is write-only: "set", and a field for a new one only when replacing it.
    secret_field = page.get_by_label("New secret", exact=True)
    expect(secret_field).to_be_hidden()
    page.get_by_label("Replace the secret").check()
    expect(secret_field).to_be_visible()
    page.get_by_label("Keep the secret").check()
    expect(secret_field).to_be_hidden()

    page.get_by_role("button", name="Add header").click()
    ui.check()
    assert json.loads(page.get_by_label("Input schema", exact=True).input_value()) == fixed, "the row button keeps it"
    page.get_by_label("Header 3 name").fill("X-Trace")
    page.get_by_label("Header 3 value").fill("on")
    page.get_by_label("Description", exact=True).fill("Tells the weather for some days")
    expect(page.get_by_role("group", name="tools/list item")).to_contain_text("for some days", timeout=10_000)
    expect(results).to_contain_text("No problems")
    ui.check()
    ui.shot("tool-editor")

    page.get_by_label("Change note").fill("days too")
    page.get_by_role("button", name="Save version 2").click()
    ui.check()
    expect(page.get_by_role("status").first).to_contain_text(f"Saved {name} v2")
    assert page.url.endswith(f"/ui/tools/{name}")
    expect(page.get_by_label("Input schema")).to_contain_text("days")

    with ui_server.admin() as admin:
        entry = admin.get(f"/api/v1/tools/{name}").json()
    assert entry["latest_version"] == 2 and entry["change_note"] == "days too"
    assert entry["spec"]["inputSchema"] == fixed
    assert entry["spec"]["webhook"]["headers"] == {
        "Authorization": "********",
        "X-Team": "********",
        "X-Trace": "********",
    }
    assert entry["spec"]["webhook"]["secret"] == "********"
    assert listed_tool(ui_server, name) == {
        "name": name,
        "title": "Weather",
        "description": "Tells the weather for some days",
        "inputSchema": fixed,
    }


def listed_tool(server: UiServer, name: str) -> dict[str, Any] | None:
    """The tool's item in what ``tools/list`` serves now (every page of it)."""
    client = server.mcp()
    try:
        return next((t for t in list_all(client, "tools/list", "tools") if t["name"] == name), None)
    finally:
        client.http.close()
