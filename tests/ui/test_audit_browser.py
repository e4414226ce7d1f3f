"""The audit trail page in a real browser (headless Chromium, Playwright): an admin filters it by
actor and verifies the hash chain; every page passes the ``UiPage`` checks (no page or console
error, no serious accessibility violation)."""

from __future__ import annotations

import os
import re
import secrets

import httpx
import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.http import TLS
from tests.ui.conftest import UiPage


def test_an_admin_filters_the_audit_trail_and_verifies_the_chain(ui: UiPage) -> None:
    name = f"audit-browser-{secrets.token_hex(3)}"
    prompt = {"name": name, "arguments": [{"name": "who", "required": True}], "template": "Hi {{ who }}"}
    headers = {"Authorization": f"Bearer {ui.server.editor_token}"}
    with httpx.Client(base_url=ui.server.url, headers=headers, timeout=30, verify=TLS) as editor:
        assert editor.post("/api/v1/prompts", json=prompt).status_code == 201
        assert editor.put(f"/api/v1/prompts/{name}/labels/staging", json={"version": 1}).status_code == 200

    ui.sign_in(ui.server.admin_token)
    ui.page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit").click()
    ui.check()
    expect(ui.page.get_by_role("heading", level=1)).to_have_text("Audit trail")

    ui.page.get_by_label("Actor").fill("ui-editor")
    ui.page.get_by_role("button", name="Filter").click()
    ui.page.wait_for_url(re.compile(r"actor=ui-editor"))
    ui.check()
    rows = ui.page.locator("table.audit tbody tr")
    expect(rows.filter(has_text=name)).to_have_count(2)  # created, then the label move
    for index in range(rows.count()):
        expect(rows.nth(index).locator("td").nth(1)).to_contain_text("ui-editor")
    moved = rows.filter(has_text="label moved")
    expect(moved.first).to_contain_text(name)
    expect(moved.first.locator("td").nth(1)).to_contain_text("token")  # which token made it
    ui.shot("audit-filtered")

    ui.page.get_by_role("button", name="Verify chain").click()
    ui.check()
    expect(ui.page.get_by_role("status")).to_contain_text(re.compile(r"Audit chain intact: \d+ changes verified"))
    ui.shot("audit-verified")


def test_a_viewer_reads_the_trail_without_a_verify_button(ui: UiPage) -> None:
    ui.sign_in(ui.server.viewer_token)
    ui.goto("/ui/audit")
    expect(ui.page.get_by_role("heading", level=1)).to_have_text("Audit trail")
    expect(ui.page.get_by_role("button", name="Verify chain")).to_have_count(0)
    with httpx.Client(base_url=ui.server.url, timeout=30, verify=TLS) as anonymous:
        # Verifying is an admin's: the form post without a session goes to the sign-in page.
        refused = anonymous.post("/ui/audit/verify", data={"csrf_token": "x"}, follow_redirects=False)
        assert refused.status_code in (303, 307), refused.status_code
