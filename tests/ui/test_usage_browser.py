"""The usage pages in a real browser (headless Chromium): the overview and an entry's usage tab
pass the ``UiPage`` checks (no page or console error, no serious accessibility violation), with
counts in them, and read the same with JavaScript off.

The counts are put in the server's database with the counter's own writer (the counting over
MCP is tested end to end in tests/test_usage.py): the shared UI server flushes every 10 s.
"""

from __future__ import annotations

import os
import re

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from registry.catalog.usage import hour_number, write_counts
from registry.db.engine import Database
from tests.ui.conftest import UiPage


def test_usage_overview_and_entry_tab(ui: UiPage) -> None:
    with ui.server.admin() as admin:
        tokens = {t["name"]: t["id"] for t in admin.get("/api/v1/tokens").json()["items"]}
    viewer_id = tokens["ui-viewer"]
    db = Database(f"sqlite:///{ui.server.process.data_dir / 'registry.db'}")
    try:
        now = hour_number()
        write_counts(
            db,
            {
                (now, "prompt", "summarize", 1, viewer_id, None, "get"): 12,
                (now - 30, "prompt", "summarize", 1, None, None, "get"): 3,
                (now, "resource", "server-info", 1, None, "alice@example.com", "read"): 2,
            },
        )
    finally:
        db.dispose()

    ui.sign_in(ui.server.viewer_token)
    ui.page.get_by_role("navigation", name="Main").get_by_role("link", name="Usage").click()
    ui.check()
    expect(ui.page.get_by_role("heading", name="Usage", level=1)).to_be_visible()
    expect(ui.page.get_by_role("link", name="Last 24 hours")).to_have_attribute("aria-current", "page")
    agents = ui.page.locator("table.usage-agents")
    expect(agents).to_contain_text("ui-viewer")
    expect(agents).to_contain_text("alice@example.com")
    ui.page.get_by_role("link", name="Last 7 days").click()
    ui.check()
    expect(ui.page.locator("table.usage-entries")).to_contain_text("15")  # 12 + the 3 of 30 hours ago
    ui.shot("usage-overview")

    ui.page.locator("table.usage-entries").get_by_role("link", name="summarize").click()
    ui.check()
    assert re.search(r"/ui/prompts/summarize/usage$", ui.page.url)
    expect(ui.page.get_by_role("navigation", name="Entry pages").get_by_role("link", name="Usage")).to_have_attribute(
        "aria-current", "page"
    )
    row = ui.page.locator("#usage-v1")
    expect(row).to_contain_text("ui-viewer")
    expect(row).to_contain_text("anonymous")
    ui.page.get_by_label("Agents that used a version in the last").select_option("1")
    ui.page.get_by_role("button", name="Show").click()
    ui.check()
    assert ui.page.url.endswith("/ui/prompts/summarize/usage?days=1")
    expect(row).not_to_contain_text("anonymous")  # 30 hours ago: not in the last day
    ui.shot("usage-entry")

    # An entry page links to its usage.
    ui.goto("/ui/resources/server-info")
    ui.page.get_by_role("navigation", name="Entry pages").get_by_role("link", name="Usage").click()
    ui.check()
    expect(ui.page.locator("#usage-v1")).to_contain_text("alice@example.com")

    # Plain pages: the same with JavaScript off.
    context = ui.context.browser.new_context(java_script_enabled=False)  # type: ignore[union-attr]
    try:
        plain = UiPage(context, ui.server, ui.axe, ui.shots)
        plain.page.goto(ui.url("/ui/signin"))
        plain.page.get_by_label("API token").fill(ui.server.viewer_token)
        plain.page.get_by_role("button", name="Sign in").click()
        plain.goto("/ui/usage?window=30d", check=False)
        assert "ui-viewer" in plain.page.content()
        plain.goto("/ui/prompts/summarize/usage?days=7", check=False)
        assert "usage-v1" in plain.page.content()
    finally:
        context.close()
