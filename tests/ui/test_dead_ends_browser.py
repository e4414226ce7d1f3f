"""Error pages that point the way on (issue 25, item 7): a 404 or 409 links what it is about (the
entry, the version, its history, the open change request), not only the home page."""

from __future__ import annotations

import os

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.ui.conftest import UiPage, UiServer


def test_a_missing_version_links_the_entry_and_its_history(ui: UiPage, ui_server: UiServer) -> None:
    name = ui_server.create_prompt("Hello {{ who }}", versions=("Hi {{ who }}",), prefix="dead-end")
    ui.sign_in(ui_server.viewer_token)
    ui.goto(f"/ui/prompts/{name}?version=7", status=404)
    page = ui.page
    expect(page.get_by_role("alert")).to_contain_text(f"prompt '{name}' has no version 7 (its newest is v2)")
    expect(page.get_by_role("link", name=f"History of {name} (every version)")).to_be_visible()
    page.get_by_role("link", name=f"Prompt {name}").click()
    ui.check()
    assert page.url.endswith(f"/ui/prompts/{name}")


def test_a_missing_entry_links_its_list_and_a_search_for_the_name(ui: UiPage) -> None:
    ui.sign_in(ui.server.viewer_token)
    ui.goto("/ui/prompts/no-such-prompt-here", status=404)
    page = ui.page
    expect(page.get_by_role("link", name="All prompts")).to_have_attribute("href", "/ui/prompts")
    page.get_by_role("link", name="Search prompts for “no-such-prompt-here”").click()
    ui.check()
    assert page.url.endswith("/ui/prompts?q=no-such-prompt-here")


def test_a_409_links_the_open_change_request_and_the_entry(ui: UiPage, ui_server: UiServer, guarded_label: str) -> None:
    name = ui_server.create_prompt("Hello {{ who }}", versions=("Hi {{ who }}",), prefix="dead-end")
    with ui_server.admin() as admin:
        opened = admin.post(
            "/api/v1/change-requests", json={"kind": "prompt", "name": name, "label": guarded_label, "to_version": 2}
        )
        assert opened.status_code == 201, opened.text
    request_id = opened.json()["id"]
    ui.sign_in(ui_server.editor_token)
    ui.goto(f"/ui/prompts/{name}/promote?version=2&label={guarded_label}")
    page = ui.page
    page.get_by_role("button", name=f"Request review to point {guarded_label} at v2").click()
    ui.check()
    expect(page.get_by_role("heading", level=1)).to_have_text("Conflict")
    expect(page.get_by_role("link", name=f"Prompt {name}")).to_have_attribute("href", f"/ui/prompts/{name}")
    page.get_by_role("link", name=f"Go to change request #{request_id}").click()
    ui.check()
    assert page.url.endswith(f"/ui/reviews/{request_id}")


def test_a_409_about_a_label_links_the_entry_and_the_version(
    ui: UiPage, ui_server: UiServer, guarded_label: str
) -> None:
    name = ui_server.create_prompt("Hello {{ who }}", versions=("Hi {{ who }}",), prefix="dead-end")
    with ui_server.admin() as admin:
        moved = admin.put(
            f"/api/v1/prompts/{name}/labels/{guarded_label}", json={"version": 1, "override_reason": "setup"}
        )
        assert moved.status_code == 200, moved.text
    ui.sign_in(ui_server.editor_token)
    ui.goto(f"/ui/prompts/{name}/promote?version=1&label={guarded_label}")
    page = ui.page
    page.get_by_role("button", name=f"Request review to point {guarded_label} at v1").click()
    ui.check()
    expect(page.get_by_role("alert")).to_contain_text(f"{guarded_label} already serves v1")
    expect(page.get_by_role("link", name=f"Prompt {name}")).to_be_visible()
    page.get_by_role("link", name=f"Version 1 of {name}").click()
    ui.check()
    assert page.url.endswith(f"/ui/prompts/{name}?version=1")
