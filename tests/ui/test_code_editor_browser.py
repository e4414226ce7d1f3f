"""The prompt editor as an editor for templates, in a real browser: row buttons that change the rows
in place (no reload, the focus on the new row), the code editor over the template fields (line
numbers, the checker's problems at their line, completion of the declared arguments, Tab not
trapped), preview inputs typed from the arguments, no error on a blank form before anything is
typed, and all of it still posting with JavaScript off."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.ui.conftest import UiPage, UiServer, fill_template, without_javascript
from tests.ui.test_tool_editor_browser import make_tool

MARKER = "window.__stillHere = 'yes'"
STILL_HERE = "() => window.__stillHere === 'yes'"


def test_row_buttons_change_the_rows_in_place_and_move_the_focus(ui: UiPage, ui_server: UiServer) -> None:
    name = ui_server.create_prompt("Hello {{ who }}")
    ui.sign_in(ui_server.editor_token)
    ui.page.set_viewport_size({"width": 1280, "height": 500})
    page = ui.goto(f"/ui/prompts/{name}/edit")
    page.evaluate(MARKER)
    add = page.get_by_role("button", name="Add argument")
    add.scroll_into_view_if_needed()
    page.evaluate("window.scrollBy(0, 120)")
    expect(add).to_be_in_viewport()
    scrolled = page.evaluate("window.scrollY")
    assert scrolled > 0

    add.click()
    new_name = page.get_by_label("Argument 2 name")
    expect(new_name).to_be_focused()
    assert page.evaluate(STILL_HERE), "the page was reloaded"
    assert page.evaluate("window.scrollY") > 0, "the page jumped to the top"
    expect(new_name).to_be_in_viewport()
    assert page.get_by_label("Argument 1 name").input_value() == "who"
    ui.check()

    new_name.fill("whom")
    page.get_by_role("button", name="Remove argument 1").click()
    survivor = page.get_by_label("Argument 1 name")
    expect(survivor).to_have_value("whom")
    expect(survivor).to_be_focused()  # the row now first (nothing came before the removed one)
    expect(page.get_by_label("Argument 2 name")).to_have_count(0)
    # The live check follows the removal: "who" is no longer declared.
    expect(page.get_by_role("list", name="Problems")).to_contain_text("who", timeout=10_000)
    page.get_by_role("button", name="Remove argument 1").click()
    expect(page.get_by_role("button", name="Add argument")).to_be_focused()  # no row left
    assert page.evaluate(STILL_HERE)

    page.get_by_role("button", name="Add message").click()
    expect(page.locator("#msg-1-role")).to_be_focused()
    expect(page.locator(".cm-editor")).to_have_count(2)  # the new message's template has its editor
    expect(page.locator("#msg-0-text")).to_have_value("Hello {{ who }}")
    fill_template(page, "msg-1-text", "Second message")
    ui.check()
    page.get_by_role("button", name="Remove message 2").click()
    expect(page.locator("#msg-0-role")).to_be_focused()
    expect(page.locator(".cm-editor")).to_have_count(1)
    assert page.evaluate(STILL_HERE), "the page was reloaded"
    ui.check()

    # The tool (and resource) editors' header rows work the same way.
    tool = make_tool(ui_server)
    page = ui.goto(f"/ui/tools/{tool}/edit")
    page.evaluate(MARKER)
    page.get_by_role("button", name="Add header").click()
    expect(page.get_by_label("Header 3 name")).to_be_focused()
    assert page.evaluate(STILL_HERE), "the page was reloaded"
    ui.check()


def test_the_template_editor_numbers_lines_marks_problems_and_completes_arguments(
    ui: UiPage, ui_server: UiServer
) -> None:
    arguments: list[dict[str, Any]] = [
        {"name": "who", "required": True},
        {"name": "tone", "enum": ["formal", "casual"], "default": "casual"},
    ]
    first = "Hello {{ who }},\n{% if tone == 'formal' %}We thank you.{% else %}Thanks!{% endif %}\n"
    name = ui_server.create_prompt(first + "line three", arguments=arguments)
    ui.sign_in(ui_server.editor_token)
    page = ui.goto(f"/ui/prompts/{name}/edit")
    editor = page.get_by_role("textbox", name="Template (text messages)")
    expect(editor).to_be_visible()
    expect(page.locator("#msg-0-text")).to_be_hidden()  # the posted field, behind the editor
    expect(page.locator(".cm-lineNumbers .cm-gutterElement", has_text="3")).to_be_visible()

    fill_template(page, "msg-0-text", first + "See {{ nobody }} about it, {{ tone | upper }}.")
    expect(page.get_by_role("list", name="Problems")).to_contain_text("Message 1, line 3", timeout=10_000)
    lines = page.locator(".cm-content .cm-line")
    expect(lines.nth(2).locator(".cm-lintRange-error")).to_have_count(1)
    expect(lines.nth(0).locator(".cm-lintRange")).to_have_count(0)
    expect(lines.nth(1).locator(".cm-lintRange")).to_have_count(0)
    expect(page.locator(".cm-lint-marker-error")).to_have_count(1)
    ui.check()
    page.evaluate("document.getElementById('arguments-rows').scrollIntoView()")
    ui.shot("prompt-code-editor-problem")

    # A problem fixed: its mark goes with the next check.
    fill_template(page, "msg-0-text", first + "line three")
    expect(page.locator("#check-results")).to_contain_text("No problems", timeout=10_000)
    expect(page.locator(".cm-lintRange")).to_have_count(0)

    # Completion of the declared arguments, as soon as a tag is open; one declared just now too.
    page.get_by_role("button", name="Add argument").click()
    page.get_by_label("Argument 3 name").fill("topic")
    editor.click()
    page.keyboard.press("ControlOrMeta+End")
    page.keyboard.press("Enter")
    page.keyboard.type("About {{ ")
    offered = page.locator(".cm-tooltip-autocomplete")
    expect(offered).to_be_visible()
    expect(offered.get_by_role("option", name="topic")).to_be_visible()
    expect(offered.get_by_role("option", name="who")).to_be_visible()
    page.keyboard.type("top")
    expect(offered.get_by_role("option")).to_have_count(1)
    # Picked with the pointer: Enter races the list on a loaded machine (a live check's answer landing
    # between the filter and the key closed it once in CI, and Enter then broke the line).
    offered.get_by_role("option", name="topic").click()
    # (The braces close themselves as they are typed.)
    expect(page.locator("#msg-0-text")).to_have_value(re.compile(r"line three\nAbout \{\{ topic ?\}\}"))
    expect(page.locator("#check-results")).to_contain_text("No problems", timeout=10_000)
    # Nothing is offered in the prose around the tags.
    page.keyboard.press("ControlOrMeta+End")
    page.keyboard.type(" to")
    expect(offered).to_have_count(0)

    # Text set on the textarea by other code (a draft offered back), with an input event: the editor follows.
    page.evaluate(
        "() => { const t = document.getElementById('msg-0-text'); t.value = 'Restored {{ who }}';"
        " t.dispatchEvent(new Event('input', {bubbles: true})); }"
    )
    expect(page.locator(".cm-content")).to_have_text("Restored {{ who }}")

    # Tab is not trapped: it moves on from the editor.
    editor.focus()
    page.keyboard.press("Tab")
    assert page.evaluate("() => !document.activeElement.classList.contains('cm-content')")
    ui.check()


def test_preview_inputs_follow_the_arguments(ui: UiPage, ui_server: UiServer) -> None:
    arguments: list[dict[str, Any]] = [
        {"name": "who", "required": True},
        {"name": "tone", "enum": ["formal", "casual"], "default": "casual"},
        {"name": "greeting", "default": "Hello"},
    ]
    name = ui_server.create_prompt("{{ greeting }}, {{ who }}! ({{ tone }})", arguments=arguments)
    ui.sign_in(ui_server.editor_token)
    page = ui.goto(f"/ui/prompts/{name}/edit")
    tone = page.get_by_label("tone", exact=True)
    assert tone.evaluate("e => e.tagName") == "SELECT", "allowed values are a choice"
    expect(tone).to_have_value("casual")  # its default
    assert tone.locator("option").all_inner_texts()[1:] == ["formal", "casual"]
    expect(page.get_by_label("greeting", exact=True)).to_have_value("Hello")
    who = page.get_by_label("who", exact=True)
    expect(who).to_have_attribute("aria-required", "true")
    expect(page.locator("#sample-who-required")).to_have_text("required")
    expect(page.locator("#sample-greeting-required")).to_have_count(0)
    ui.check()

    who.fill("Ada")
    preview = page.get_by_label("Rendered message 1")
    expect(preview).to_have_text("Hello, Ada! (casual)", timeout=10_000)
    tone.select_option("formal")
    expect(preview).to_have_text("Hello, Ada! (formal)", timeout=10_000)

    # New allowed values redraw the input.
    page.get_by_label("Argument 3 allowed values").fill("Hello, Hi")
    expect(page.get_by_label("greeting", exact=True).locator("option", has_text="Hi")).to_have_count(1, timeout=10_000)
    ui.check()
    ui.shot("prompt-preview-typed")


def test_a_blank_new_prompt_shows_no_error_before_input(ui: UiPage, ui_server: UiServer) -> None:
    ui.sign_in(ui_server.editor_token)
    page = ui.goto("/ui/prompts/-/new")
    results = page.locator("#check-results")
    expect(results).to_contain_text("No problems so far", timeout=10_000)  # the check on load ran
    expect(results).to_contain_text("Give it a name before you create it")
    expect(page.get_by_role("list", name="Problems")).to_have_count(0)
    expect(page.locator("#form-error")).to_have_count(0)
    ui.check()

    page.get_by_label("Name", exact=True).fill("not a name")
    problems = page.get_by_role("list", name="Problems")
    expect(problems).to_contain_text("use 1 to 128 characters", timeout=10_000)
    expect(problems).not_to_contain_text("pattern")
    page.get_by_label("Name", exact=True).fill("")
    expect(results).to_contain_text("No problems so far", timeout=10_000)

    page.get_by_role("button", name="Create").click()
    error = page.locator("#form-error")
    expect(error).to_contain_text("name: use 1 to 128 characters")
    expect(error).not_to_contain_text("pattern")
    ui.check()


def test_with_javascript_off_rows_post_back_and_the_textarea_posts(
    browser: Any, ui_server: UiServer, axe_source: str, screenshot_dir: Path
) -> None:
    with without_javascript(browser, ui_server, axe_source, screenshot_dir, ui_server.editor_token) as ui:
        page = ui.page
        name = ui_server.create_prompt("Hello {{ who }}")
        page.goto(ui_server.url + f"/ui/prompts/{name}/edit")
        expect(page.locator(".cm-editor")).to_have_count(0)
        template = page.get_by_label("Template (text messages)")
        expect(template).to_be_visible()
        page.get_by_role("button", name="Add argument").click()  # a post-back
        page.get_by_label("Argument 2 name").fill("topic")
        template.fill("Hello {{ who }}, about {{ topic }}")
        page.get_by_role("button", name="Save version 2").click()
        expect(page.get_by_role("status").first).to_contain_text("v2")
        assert ui_server.prompt_text(name, {"who": "Ada", "topic": "tea"}) == "Hello Ada, about tea"
