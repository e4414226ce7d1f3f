"""The web UI in a real browser, used as a person would (headless Chromium, Playwright).

Each test signs in through the form, clicks through the pages, and checks what agents see over
MCP afterwards. Every page visited is checked for page and console errors and for critical or
serious accessibility violations (axe-core); see ``UiPage`` in conftest.py.
"""

from __future__ import annotations

import os
import re

import httpx
import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.http import TLS
from tests.ui.conftest import UiPage, UiServer

DEMO_PROMPTS = ("bug-analysis-report", "code-review", "incident-postmortem", "summarize")


def test_sign_in_with_a_wrong_token_then_a_right_one_and_sign_out(ui: UiPage) -> None:
    ui.goto("/ui/prompts", status=200)  # redirected to the sign-in page
    assert "/ui/signin" in ui.page.url
    ui.page.get_by_label("API token").fill("mcpr_not-a-real-token")
    ui.page.get_by_role("button", name="Sign in").click()
    ui.check()
    expect(ui.page.get_by_role("alert")).to_contain_text("not valid")
    ui.shot("signin-wrong-token")

    ui.page.get_by_label("API token").fill(ui.server.editor_token)
    ui.page.get_by_role("button", name="Sign in").click()
    ui.check()
    assert ui.page.url.endswith("/ui/prompts"), "back to the page asked for"
    expect(ui.page.get_by_role("heading", level=1)).to_have_text("Prompts")

    cookie = next(c for c in ui.context.cookies() if c["name"] == "mcpr_ui_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["path"] == "/ui"
    assert not cookie["secure"], "plain http: not Secure (it is behind https)"

    ui.page.get_by_role("button", name="Sign out").click()
    ui.check()
    assert "/ui/signin" in ui.page.url
    expect(ui.page.get_by_role("status")).to_contain_text("signed out")
    ui.goto("/ui/")
    assert "/ui/signin" in ui.page.url, "signed out: the session cookie no longer opens pages"


def test_home_shows_counts_and_newest_changes(ui: UiPage) -> None:
    ui.sign_in(ui.server.viewer_token)
    expect(ui.page.get_by_role("heading", name="Catalog")).to_be_visible()
    cards = ui.page.locator(".card")
    expect(cards).to_have_count(3)
    prompts_card = cards.filter(has_text="Prompts")
    assert int(prompts_card.locator(".big").inner_text().replace(",", "")) >= len(DEMO_PROMPTS)
    expect(ui.page.get_by_role("table", name="The ten newest changes to the catalog")).to_be_visible()
    ui.shot("home")


def test_demo_prompts_listed_search_tag_filter_and_archived_toggle(ui: UiPage) -> None:
    ui.sign_in(ui.server.viewer_token)
    ui.goto("/ui/prompts")
    for name in DEMO_PROMPTS:
        expect(ui.page.get_by_role("link", name=name, exact=True)).to_be_visible()
    summarize_row = ui.page.locator("tr", has=ui.page.get_by_role("link", name="summarize", exact=True))
    expect(summarize_row.locator(".label-production")).to_contain_text("v")
    ui.shot("prompts-list")

    # Live search (htmx): typing narrows the list without a page load, and the URL follows.
    ui.page.get_by_label("Search").fill("summar")
    expect(ui.page.get_by_role("link", name="code-review", exact=True)).to_have_count(0)
    expect(ui.page.get_by_role("link", name="summarize", exact=True)).to_be_visible()
    ui.page.wait_for_url(re.compile(r"q=summar"))
    ui.check()

    # Tag filter: following a tag link lists only entries with that tag.
    ui.goto("/ui/prompts")
    tag = ui.page.locator("tr", has=ui.page.get_by_role("link", name="summarize", exact=True)).locator("a.tag").first
    tag_name = tag.inner_text()
    tag.click()
    ui.page.wait_for_url(re.compile(rf"tag={re.escape(tag_name)}"))
    ui.check()
    expect(ui.page.get_by_label("Tag")).to_have_value(tag_name)
    expect(ui.page.get_by_role("link", name="summarize", exact=True)).to_be_visible()

    # A bad tag is a clear message, not an error page.
    ui.goto("/ui/prompts?tag=no%20spaces", status=400)
    expect(ui.page.get_by_role("alert")).to_contain_text("is not a tag")

    # Archived toggle: an archived prompt shows only with it.
    name = ui.server.create_prompt("Archived {{ who }}", prefix="ui-archived")
    with ui.server.admin() as admin:
        assert admin.delete(f"/api/v1/prompts/{name}").status_code == 200
    ui.goto(f"/ui/prompts?q={name}")
    expect(ui.page.get_by_role("link", name=name, exact=True)).to_have_count(0)
    ui.page.get_by_label("Archived only").check()
    expect(ui.page.get_by_role("link", name=name, exact=True)).to_be_visible()
    ui.check()


V1 = (
    "You are a support assistant for {{ who }}.\n"
    "Answer briefly, first draft.\n"
    "Cite the documentation when you can.\n"
    "Never promise dates."
)
V2 = (
    "You are a friendly support assistant for {{ who }}.\n"
    "Answer in at most three sentences, second draft.\n"
    "Cite the documentation when you can.\n"
    "Never promise dates.\n"
    "Offer a next step."
)


def test_entry_page_history_and_side_by_side_diff(ui: UiPage) -> None:
    name = ui.server.create_prompt(V1, versions=(V2,), prefix="support-reply", title="Support reply")
    ui.sign_in(ui.server.viewer_token)
    ui.goto(f"/ui/prompts/{name}")
    expect(ui.page.get_by_role("heading", level=1)).to_contain_text(name)
    expect(ui.page.locator("pre.template")).to_have_text(V2)
    expect(ui.page.get_by_role("cell", name="whom to greet")).to_be_visible()
    ui.shot("prompt-entry")

    ui.page.get_by_role("link", name="History (2)").click()
    ui.check()
    rows = ui.page.locator("table.history tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("edit 2")
    expect(rows.nth(0)).to_contain_text("production")
    expect(rows.nth(1)).to_contain_text("first")
    ui.shot("prompt-history")

    rows.nth(0).get_by_role("link", name="diff with v1").click()
    ui.check()
    assert re.search(r"/diff\?from=1&to=2$", ui.page.url)
    section = ui.page.locator("section.field-diff", has=ui.page.get_by_role("heading", name=re.compile("^messages")))
    removed = section.locator("td.old del").all_inner_texts()
    added = section.locator("td.new ins").all_inner_texts()
    assert "first" in removed and "briefly" in removed, removed
    assert "second" in added and any("friendly" in a for a in added), added
    expect(section.locator("tr.insert")).to_contain_text("Offer a next step.")
    ui.shot("prompt-diff")

    # Reading works with JavaScript off: list, entry, history, diff are plain pages.
    page = ui.context.browser.new_context(java_script_enabled=False)  # type: ignore[union-attr]
    try:
        plain = UiPage(page, ui.server, ui.axe, ui.shots)
        plain.page.goto(ui.url("/ui/signin"))
        plain.page.get_by_label("API token").fill(ui.server.viewer_token)
        plain.page.get_by_role("button", name="Sign in").click()
        for path, marker in (
            ("/ui/prompts", "summarize"),
            (f"/ui/prompts/{name}", "Offer a next step."),
            (f"/ui/prompts/{name}/history", "edit 2"),
            (f"/ui/prompts/{name}/diff?from=1&to=2", "<ins>second</ins>"),
        ):
            plain.goto(path, check=False)
            assert marker in plain.page.content(), path
    finally:
        page.close()


def test_roll_production_back_and_forward_through_the_ui(ui: UiPage, ui_server: UiServer) -> None:
    name = ui_server.create_prompt("Old greeting for {{ who }}", versions=("New greeting for {{ who }}",))
    assert ui_server.prompt_text(name, {"who": "Ada"}) == "New greeting for Ada"

    ui.sign_in(ui_server.editor_token)
    ui.goto(f"/ui/prompts/{name}/history")
    ui.page.get_by_role("link", name="Roll production back to v1…").click()
    ui.check()
    expect(ui.page.get_by_role("heading", level=1)).to_have_text("Roll production back?")
    ui.shot("confirm-rollback")
    ui.page.get_by_role("button", name="Roll production back to v1").click()
    ui.check()
    expect(ui.page.get_by_role("status")).to_contain_text("production now serves v1")
    assert ui_server.prompt_text(name, {"who": "Ada"}) == "Old greeting for Ada", "agents are served v1 again"
    ui.shot("entry-after-rollback")

    # Forward again from the entry page's promote form.
    ui.page.get_by_label("Version").fill("2")
    ui.page.get_by_label("Label", exact=True).fill("production")
    ui.page.get_by_role("button", name="Point label at version…").click()
    ui.check()
    ui.page.get_by_role("button", name="Point production at v2").click()
    ui.check()
    expect(ui.page.get_by_role("status")).to_contain_text("production now serves v2")
    assert ui_server.prompt_text(name, {"who": "Ada"}) == "New greeting for Ada"

    # A new label (staging) on v1; production is untouched.
    ui.goto(f"/ui/prompts/{name}/promote?label=staging&version=1")
    ui.page.get_by_role("button", name="Point staging at v1").click()
    ui.check()
    expect(ui.page.locator(".entry-head .label-staging")).to_contain_text("v1")
    assert ui_server.prompt_text(name, {"who": "Ada"}) == "New greeting for Ada"


def test_archive_and_restore_through_the_ui(ui: UiPage, ui_server: UiServer) -> None:
    name = ui_server.create_prompt("Archivable {{ who }}")
    assert name in ui_server.prompt_names()
    ui.sign_in(ui_server.editor_token)
    ui.goto(f"/ui/prompts/{name}")
    ui.page.get_by_role("link", name="Archive…").click()
    ui.check()
    ui.page.get_by_role("button", name=f"Archive {name}").click()
    ui.check()
    expect(ui.page.get_by_role("status")).to_contain_text("archived")
    expect(ui.page.locator("h1 .archived")).to_be_visible()
    assert name not in ui_server.prompt_names(), "archived: agents no longer list it"

    ui.page.get_by_role("link", name="Restore…").click()
    ui.check()
    ui.page.get_by_role("button", name=f"Restore {name}").click()
    ui.check()
    expect(ui.page.get_by_role("status")).to_contain_text("restored")
    assert name in ui_server.prompt_names()


def test_token_created_shown_once_works_on_mcp_then_revoked(ui: UiPage, ui_server: UiServer) -> None:
    ui.sign_in(ui_server.admin_token)
    ui.goto("/ui/tokens")
    ui.shot("tokens")
    ui.page.get_by_label("Name").fill("ui-agent")
    ui.page.get_by_role("radio", name="agent", exact=True).check()
    ui.page.get_by_label("Label (agent tokens)").fill("staging")
    ui.page.get_by_label("Expires in (days)").fill("7")
    ui.page.get_by_role("button", name="Create token").click()
    ui.check()
    expect(ui.page.get_by_role("heading", level=1)).to_have_text("Token created")
    value = ui.page.get_by_label("Token value").input_value()
    assert value.startswith("mcpr_")
    expect(ui.page.get_by_role("button", name="Copy")).to_be_visible()

    # Shown once: the token list never shows a value.
    ui.goto("/ui/tokens")
    assert value not in ui.page.content()
    row = ui.page.locator("tr", has_text="ui-agent").first
    expect(row).to_contain_text("agent")
    expect(row).to_contain_text("staging")

    # It opens MCP.
    agent = ui_server.mcp(value)
    listed = agent.request("prompts/list", {})
    assert "result" in listed
    agent.http.close()

    # Revoked through the UI: refused at once.
    row.get_by_role("link", name="Revoke ui-agent").click()
    ui.check()
    ui.page.get_by_role("button", name="Revoke ui-agent").click()
    ui.check()
    expect(ui.page.get_by_role("status")).to_contain_text("revoked")
    with httpx.Client(base_url=ui_server.url, timeout=30, verify=TLS) as http:
        refused = http.post(
            "/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
            headers={"Authorization": f"Bearer {value}", "Accept": "application/json, text/event-stream"},
        )
    assert refused.status_code == 401, refused.text

    # Bad input: a clear message, nothing written (a role is required: the browser asks for one
    # first; the server refuses a form without one too, keeping what was typed).
    before = ui.page.locator("table.tokens tbody tr").count()
    expect(ui.page.get_by_role("radio", name="viewer", exact=True)).to_have_attribute("required", "")
    ui.page.get_by_label("Name").fill("no-scope")
    ui.page.get_by_label("Label (agent tokens)").fill("Not A Label")
    ui.page.get_by_role("radio", name="viewer", exact=True).check()
    ui.page.get_by_role("button", name="Create token").click()
    ui.check()
    expect(ui.page.get_by_role("alert")).to_contain_text("invalid label")
    expect(ui.page.get_by_label("Name")).to_have_value("no-scope")
    expect(ui.page.get_by_role("radio", name="viewer", exact=True)).to_be_checked()
    assert ui.page.locator("table.tokens tbody tr").count() == before
    no_role = ui.page.request.post(ui.url("/ui/tokens"), form={"csrf_token": ui.csrf_token(), "name": "no-scope"})
    assert no_role.status == 422 and "scopes must be a non-empty subset" in no_role.text()


def test_viewer_sees_no_edit_controls_and_its_forged_post_is_refused(ui: UiPage, ui_server: UiServer) -> None:
    name = ui_server.create_prompt("Viewer {{ who }}", versions=("Viewer v2 {{ who }}",))
    ui.sign_in(ui_server.viewer_token)
    ui.goto(f"/ui/prompts/{name}")
    expect(ui.page.get_by_role("button", name="Point label at version…")).to_have_count(0)
    expect(ui.page.get_by_role("link", name="Archive…")).to_have_count(0)
    expect(ui.page.get_by_role("navigation", name="Main").get_by_role("link", name="Tokens")).to_have_count(0)
    ui.goto(f"/ui/prompts/{name}/history")
    expect(ui.page.get_by_role("link", name=re.compile("Roll production back"))).to_have_count(0)
    ui.goto(f"/ui/prompts/{name}/promote?version=1", status=403)
    ui.goto("/ui/tokens", status=403)

    # A forged POST with the viewer's own session and CSRF token: refused, nothing written.
    ui.goto(f"/ui/prompts/{name}")
    csrf = ui.csrf_token()
    forged = ui.page.request.post(
        ui.url(f"/ui/prompts/{name}/promote"), form={"csrf_token": csrf, "label": "production", "version": "1"}
    )
    assert forged.status == 403, forged.status
    assert "needs editor" in forged.text()
    archive = ui.page.request.post(ui.url(f"/ui/prompts/{name}/archive"), form={"csrf_token": csrf})
    assert archive.status == 403
    assert ui_server.prompt_text(name, {"who": "Bo"}) == "Viewer v2 Bo"
    assert name in ui_server.prompt_names()


def test_a_post_without_the_csrf_token_is_refused(ui: UiPage, ui_server: UiServer) -> None:
    name = ui_server.create_prompt("Csrf {{ who }}", versions=("Csrf v2 {{ who }}",))
    ui.sign_in(ui_server.editor_token)
    ui.goto(f"/ui/prompts/{name}")
    for form in (
        {"label": "production", "version": "1"},
        {"csrf_token": "forged", "label": "production", "version": "1"},
    ):
        refused = ui.page.request.post(ui.url(f"/ui/prompts/{name}/promote"), form=form)
        assert refused.status == 403, refused.status
        assert "security token" in refused.text()
    refused = ui.page.request.post(ui.url(f"/ui/prompts/{name}/archive"), form={})
    assert refused.status == 403
    assert ui_server.prompt_text(name, {"who": "Cy"}) == "Csrf v2 Cy", "nothing was written"
    assert name in ui_server.prompt_names()
    # The same POST with the page's token goes through (the refusal was the token, not the route).
    ok = ui.page.request.post(ui.url(f"/ui/prompts/{name}/archive"), form={"csrf_token": ui.csrf_token()})
    assert ok.status == 200 and name not in ui_server.prompt_names()


def test_activity_filters_by_kind_name_and_author_and_links_to_diffs(ui: UiPage, ui_server: UiServer) -> None:
    name = ui_server.create_prompt("Activity {{ who }}", versions=("Activity v2 {{ who }}",))
    ui.sign_in(ui_server.viewer_token)
    ui.goto("/ui/activity")
    ui.shot("activity")
    ui.page.get_by_label("Entry name").fill(name)
    rows = ui.page.locator("#results tbody tr")
    expect(rows).to_have_count(2)  # created, updated (htmx swapped the results in)
    ui.page.wait_for_url(re.compile(rf"name={name}"))
    ui.check()
    expect(rows.nth(0)).to_contain_text("updated")
    rows.nth(0).get_by_role("link", name="diff v1 → v2").click()
    ui.check()
    assert re.search(rf"/ui/prompts/{name}/diff\?from=1&to=2$", ui.page.url)

    ui.goto("/ui/activity?author=seed&kind=tool")
    cells = ui.page.locator("#results tbody tr td:nth-child(2)")
    assert cells.count() >= 2
    assert set(cells.all_inner_texts()) == {"seed"}
    kinds = ui.page.locator("#results tbody tr td:nth-child(4) .muted").all_inner_texts()
    assert set(kinds) == {"tool"}
    ui.goto("/ui/activity?author=nobody-at-all")
    expect(ui.page.locator("#results tbody")).to_contain_text("No changes.")


def test_resource_and_tool_pages_mask_secrets(ui: UiPage, ui_server: UiServer) -> None:
    tool = {
        "name": "ui-secret-tool",
        "description": "A tool whose webhook carries secrets",
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
        "webhook": {
            "url": "http://127.0.0.1:9/hook",  # loopback is allowed on this server (REGISTRY_WEBHOOK_ALLOWED_NETWORKS)
            "headers": {"X-Api-Key": "very-secret-header"},
            "secret": "very-secret-signing-key",
        },
    }
    with ui_server.admin() as admin:
        created = admin.post("/api/v1/tools", json=tool)
        assert created.status_code == 201, created.text
        changed = {**tool, "description": "Changed", "webhook": {**tool["webhook"], "timeout_s": 5}}
        saved = admin.put("/api/v1/tools/ui-secret-tool", json=changed)
        assert saved.status_code == 200, saved.text
    ui.sign_in(ui_server.viewer_token)
    ui.goto("/ui/tools/ui-secret-tool")
    assert "very-secret" not in ui.page.content()
    expect(ui.page.locator("dl.fields")).to_contain_text("X-Api-Key: ********")
    expect(ui.page.locator("dl.fields")).to_contain_text("(set; write-only)")
    ui.shot("tool-entry")
    ui.goto("/ui/tools/ui-secret-tool/diff")
    assert "very-secret" not in ui.page.content()
    expect(ui.page.locator("#field-webhook")).to_contain_text("timeout_s")
    ui.goto("/ui/resources")
    ui.page.get_by_role("link", name="server-info").click()
    ui.check()
    expect(ui.page.get_by_role("heading", level=1)).to_contain_text("server-info")


def test_bad_input_gives_a_page_not_a_trace(ui: UiPage) -> None:
    ui.sign_in(ui.server.editor_token)
    for path, status, words in (
        ("/ui/prompts/no-such-prompt", 404, "does not exist"),
        ("/ui/prompts/summarize?version=99999", 404, "no version"),
        ("/ui/prompts/summarize/diff?from=abc", 400, "valid integer"),
        ("/ui/prompts/summarize/promote?label=Not%20A%20Label", 422, "not a label"),
        ("/ui/nowhere", 404, "no such page"),
    ):
        ui.goto(path, status=status)
        text = ui.page.locator("main").inner_text()
        assert words in text, (path, text)
        assert "Traceback" not in ui.page.content()


def test_keyboard_only_sign_in_skip_link_and_navigation(ui: UiPage) -> None:
    ui.goto("/ui/signin")
    assert ui.page.evaluate("() => document.activeElement.id") == "token", "the token field has the focus"
    ui.page.keyboard.type(ui.server.viewer_token)
    ui.page.keyboard.press("Enter")
    ui.page.wait_for_url(re.compile(r"/ui/$"))
    ui.check()

    ui.page.keyboard.press("Tab")
    assert ui.page.evaluate("() => document.activeElement.textContent") == "Skip to content"
    ui.page.keyboard.press("Enter")
    assert ui.page.evaluate("() => document.activeElement.id") == "main", "the skip link moves focus to the content"

    ui.goto("/ui/")
    for _ in range(12):  # Tab through the header to the Prompts link, then follow it with Enter
        ui.page.keyboard.press("Tab")
        if ui.page.evaluate("() => document.activeElement.textContent") == "Prompts":
            break
    else:
        raise AssertionError("the Prompts link is not reachable with Tab")
    ui.page.keyboard.press("Enter")
    ui.page.wait_for_url(re.compile(r"/ui/prompts$"))
    ui.check()
    focus_ring = ui.page.evaluate(
        "() => { const q = document.getElementById('q'); q.focus(); return getComputedStyle(q).outlineStyle; }"
    )
    assert focus_ring != "none", "focused inputs show a focus ring"
