"""No lost work in the entry editors, in a real browser: the form is kept as a draft in the
browser's storage (per signed-in person and entry), a session that ends while someone types
leaves the page where it is, a save refused for an ended session keeps the text, the editor offers
the draft back (after signing in again, or whenever it is reopened), leaving with edits asks
first, and nobody else signed in on the same browser is offered the draft."""

from __future__ import annotations

import os
import re
import secrets
from typing import Any

import pytest

try:
    from playwright.sync_api import Dialog, Page, expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.ui.conftest import UiPage, UiServer, fill_template
from tests.waiting import wait_until

OFFER = re.compile(r"You have unsaved edits from \d\d:\d\d \(version 1\)\.")


def stored_drafts(page: Page) -> list[list[str]]:
    """The keys of the drafts this browser keeps, as [person, kind, name]."""
    keys: list[list[str]] = page.evaluate(
        "() => Object.keys(localStorage).filter(k => k.startsWith('mcpr-draft:'))"
        ".map(k => JSON.parse(k.slice('mcpr-draft:'.length))).sort()"
    )
    return keys


def wait_for_drafts(page: Page, count: int) -> None:
    """Until the browser keeps ``count`` drafts (they are written a moment after typing stops)."""
    page.wait_for_function(
        "n => Object.keys(localStorage).filter(k => k.startsWith('mcpr-draft:')).length === n", arg=count
    )


def fits_a_phone(ui: UiPage, box_id: str) -> None:
    """At 390 px wide the box ``box_id`` stays inside the window, its content inside it."""
    page = ui.page
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        fits = page.evaluate(
            "id => { const box = document.getElementById(id); "
            "return box.scrollWidth <= box.clientWidth && box.getBoundingClientRect().right <= window.innerWidth; }",
            box_id,
        )
        assert fits, f"#{box_id} is wider than a 390 px window"
        ui.check()
    finally:
        page.set_viewport_size({"width": 1366, "height": 860})


def person(server: UiServer) -> tuple[str, dict[str, Any]]:
    """A fresh editor (a token name of its own) and its first token."""
    name = f"drafts-{secrets.token_hex(4)}"
    return name, server.issue(name, ["editor"])


def accept_leaving(page: Page) -> list[str]:
    """Answer "leave" to every "leave this page?" question; the types of the dialogs seen."""
    seen: list[str] = []

    def answer(dialog: Dialog) -> None:
        seen.append(dialog.type)
        dialog.accept()

    page.on("dialog", answer)
    return seen


def sign_in_here(ui: UiPage, token: str) -> None:
    """Fill in the sign-in page the browser is on."""
    page = ui.page
    expect(page.get_by_label("API token")).to_be_visible()
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_label("API token")).to_have_count(0)


def open_new_prompt(ui: UiPage, server: UiServer, token: str) -> tuple[str, str, Page]:
    """A new prompt ("Hello {{ who }}") open in its editor, signed in with ``token``: its name,
    the editor's path and the page."""
    name = server.create_prompt("Hello {{ who }}")
    editor_path = f"/ui/prompts/{name}/edit"
    ui.sign_in(token)
    return name, editor_path, ui.goto(editor_path)


def test_a_session_ended_while_typing_keeps_the_page_and_the_edits_come_back(ui: UiPage, ui_server: UiServer) -> None:
    who, first = person(ui_server)
    name, editor_path, page = open_new_prompt(ui, ui_server, first["token"])
    # A draft with more rows than the stored prompt: it must come back whole.
    page.get_by_role("button", name="Add argument").click()
    ui.check()
    page.get_by_label("Argument 2 name").fill("mood")
    template = "Hello {{ who }},\nyou seem {{ mood }}."
    fill_template(page, "msg-0-text", template)
    expect(page.locator("#check-results")).to_contain_text("No problems")

    ui_server.revoke(first["id"])
    page.get_by_label("Description", exact=True).fill("Typed after the session ended")
    alert = page.locator("#session-ended")
    expect(alert).to_contain_text("Your session ended. Your edits are kept in this browser.")
    expect(alert.get_by_role("link", name="Sign in again")).to_be_visible()
    assert page.url == ui.url(editor_path), "the page stays where it was"
    expect(page.locator("#msg-0-text")).to_have_value(template)
    ui.check()
    ui.shot("editor-session-ended")
    fits_a_phone(ui, "session-ended")

    second = ui_server.issue(who, ["editor"])  # the same person, a new token
    alert.get_by_role("link", name="Sign in again").click()
    ui.check()
    sign_in_here(ui, second["token"])
    expect(page).to_have_url(ui.url(editor_path))
    offer = page.locator("#draft-offer")
    expect(offer).to_contain_text(OFFER)
    expect(page.locator("#msg-0-text")).to_have_value("Hello {{ who }}")
    ui.check()
    ui.shot("editor-draft-offered")

    # Back after signing in does not land on a sign-in page for a session that is gone.
    page.go_back()
    expect(page).to_have_url(ui.url(editor_path))
    expect(page.get_by_label("API token")).to_have_count(0)
    expect(offer).to_contain_text(OFFER)

    page.get_by_role("button", name="Restore them").click()
    expect(page.locator("#draft-restored")).to_be_visible()
    ui.check()
    expect(page.get_by_label("Argument 2 name")).to_have_value("mood")
    expect(page.locator("#msg-0-text")).to_have_value(template)
    expect(page.get_by_label("Description", exact=True)).to_have_value("Typed after the session ended")
    page.get_by_label("Change note").fill("kept through a sign-in")
    page.get_by_role("button", name="Save version 2").click()
    expect(page.get_by_role("status").first).to_contain_text(f"Saved {name} v2")
    ui.check()
    assert ui_server.prompt_text(name, {"who": "Ada", "mood": "calm"}) == "Hello Ada,\nyou seem calm."
    assert stored_drafts(page) == [], "a successful save drops the draft"


def test_b_a_save_refused_for_an_ended_session_keeps_the_text(ui: UiPage, ui_server: UiServer) -> None:
    who, first = person(ui_server)
    name, _editor_path, page = open_new_prompt(ui, ui_server, first["token"])
    fill_template(page, "msg-0-text", "Saved after all, {{ who }}.")
    page.get_by_label("Change note").fill("after the session ended")
    ui_server.revoke(first["id"])
    page.get_by_role("button", name="Save version 2").click()

    expect(page.get_by_role("status").first).to_have_text(
        "Your session ended, so your edits were not saved. "
        "They are kept in this browser and offered back after you sign in."
    )
    ui.check()
    second = ui_server.issue(who, ["editor"])
    sign_in_here(ui, second["token"])
    expect(page).to_have_url(ui.url(f"/ui/prompts/{name}/edit"))
    expect(page.locator("#draft-offer")).to_contain_text(OFFER)
    page.get_by_role("button", name="Restore them").click()
    ui.check()
    expect(page.locator("#msg-0-text")).to_have_value("Saved after all, {{ who }}.")
    expect(page.get_by_label("Change note")).to_have_value("after the session ended")
    page.get_by_role("button", name="Save version 2").click()
    expect(page.get_by_role("status").first).to_contain_text(f"Saved {name} v2")
    assert ui_server.prompt_text(name, {"who": "Ada"}) == "Saved after all, Ada."
    assert stored_drafts(page) == []


def test_c_leaving_an_editor_with_edits_asks_first(ui: UiPage, ui_server: UiServer) -> None:
    name, editor_path, page = open_new_prompt(ui, ui_server, ui_server.editor_token)
    asked: list[str] = []
    leave = {"yes": False}

    def answer(dialog: Dialog) -> None:
        asked.append(dialog.type)
        if leave["yes"]:
            dialog.accept()
        else:
            dialog.dismiss()

    page.on("dialog", answer)
    nav = page.get_by_role("navigation", name="Main")

    # Nothing changed: the navigation leaves without a question.
    nav.get_by_role("link", name="Prompts").click()
    expect(page).to_have_url(ui.url("/ui/prompts"))
    assert asked == []

    ui.goto(editor_path)
    description = page.get_by_label("Description", exact=True)
    description.click()
    page.keyboard.press("End")
    page.keyboard.type(" Edited.")
    nav.get_by_role("link", name="Prompts").click()
    wait_until(lambda: asked == ["beforeunload"], lambda: f"a beforeunload question (dialogs: {asked})")
    expect(page).to_have_url(ui.url(editor_path))
    expect(description).to_have_value("A prompt the web UI tests change Edited.")

    leave["yes"] = True
    page.get_by_role("link", name="Cancel").click()
    expect(page).to_have_url(ui.url(f"/ui/prompts/{name}"))
    assert asked == ["beforeunload", "beforeunload"]
    ui.check()

    # Saving does not ask (the draft left behind is offered, then dropped by the save).
    ui.goto(editor_path)
    expect(page.locator("#draft-offer")).to_be_visible()
    description.click()
    page.keyboard.press("End")
    page.keyboard.type(" Saved.")
    page.get_by_role("button", name="Save version 2").click()
    expect(page.get_by_role("status").first).to_contain_text(f"Saved {name} v2")
    assert asked == ["beforeunload", "beforeunload"]
    assert stored_drafts(page) == []


def test_d_reopening_the_editor_offers_the_draft_and_discard_drops_it(ui: UiPage, ui_server: UiServer) -> None:
    name, editor_path, page = open_new_prompt(ui, ui_server, ui_server.editor_token)
    accept_leaving(page)
    fill_template(page, "msg-0-text", "Kept for later, {{ who }}.")
    wait_for_drafts(page, 1)
    ui.goto(f"/ui/prompts/{name}")

    ui.goto(editor_path)
    offer = page.locator("#draft-offer")
    expect(offer).to_contain_text(OFFER)
    expect(offer).to_be_focused()
    fits_a_phone(ui, "draft-offer")
    expect(page.locator("#msg-0-text")).to_have_value("Hello {{ who }}")
    page.get_by_role("button", name="Discard").click()
    expect(offer).to_be_hidden()
    assert stored_drafts(page) == []
    ui.goto(editor_path)
    expect(offer).to_be_hidden()

    # A new entry's form, with more messages than a blank one: kept as "new prompt", restored whole.
    made = f"drafted-{secrets.token_hex(4)}"
    page = ui.goto("/ui/prompts/-/new")
    page.get_by_label("Name", exact=True).fill(made)
    page.get_by_role("button", name="Add message").click()
    ui.check()
    fill_template(page, "msg-0-text", "First, {{ who }}")
    fill_template(page, "msg-1-text", "Second")
    wait_for_drafts(page, 1)
    ui.goto("/ui/prompts")
    ui.goto("/ui/prompts/-/new")
    expect(offer).to_contain_text(re.compile(r"You have unsaved edits from \d\d:\d\d\."))
    page.get_by_role("button", name="Restore them").click()
    ui.check()
    expect(page.get_by_label("Name", exact=True)).to_have_value(made)
    expect(page.locator("#msg-1-text")).to_have_value("Second")
    expect(page.locator("#check-results")).to_contain_text("who")  # undeclared: named, not saved
    page.get_by_role("button", name="Add argument").click()
    ui.check()
    page.get_by_label("Argument 1 name").fill("who")
    page.get_by_role("button", name="Create").click()
    expect(page.get_by_role("status").first).to_contain_text(f"Created {made} v1")
    assert stored_drafts(page) == [], "creating the entry drops the new form's draft"


def test_e_nobody_else_signed_in_on_the_browser_is_offered_the_draft(ui: UiPage, ui_server: UiServer) -> None:
    who, mine = person(ui_server)
    name, editor_path, page = open_new_prompt(ui, ui_server, mine["token"])
    accept_leaving(page)
    fill_template(page, "msg-0-text", "Only mine, {{ who }}.")
    wait_for_drafts(page, 1)

    ui.context.clear_cookies()  # my session is gone from this browser; I did not sign out
    ui.sign_in(ui_server.editor_token)  # someone else ("ui-editor") on the same browser
    ui.goto(editor_path)
    expect(page.locator("#msg-0-text")).to_have_value("Hello {{ who }}")
    expect(page.locator("#draft-offer")).to_be_hidden()
    assert "Only mine" not in page.content()
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("API token")).to_be_visible()
    assert stored_drafts(page) == [[f"token:{who}", "prompt", name]], "their sign-out keeps my draft"

    ui.sign_in(mine["token"])
    ui.goto(editor_path)
    expect(page.locator("#draft-offer")).to_contain_text(OFFER)
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("API token")).to_be_visible()
    assert stored_drafts(page) == [], "signing out drops my drafts (a shared computer keeps nothing of mine)"


@pytest.mark.parametrize("collection", ["resources", "tools"])
def test_f_every_entry_editor_keeps_its_draft(ui: UiPage, ui_server: UiServer, collection: str) -> None:
    made = f"drafted-{secrets.token_hex(4)}"
    ui.sign_in(ui_server.editor_token)
    page = ui.goto(f"/ui/{collection}/-/new")
    accept_leaving(page)
    page.get_by_label("Name", exact=True).fill(made)
    page.get_by_label("Description", exact=True).fill("Kept while I was away")
    wait_for_drafts(page, 1)
    ui.goto(f"/ui/{collection}")
    ui.goto(f"/ui/{collection}/-/new")
    expect(page.get_by_label("Name", exact=True)).to_have_value("")
    page.get_by_role("button", name="Restore them").click()
    ui.check()
    expect(page.get_by_label("Name", exact=True)).to_have_value(made)
    expect(page.get_by_label("Description", exact=True)).to_have_value("Kept while I was away")


def test_g_a_page_without_an_editor_goes_to_sign_in_when_the_session_ends_and_comes_back(
    ui: UiPage, ui_server: UiServer
) -> None:
    who, mine = person(ui_server)
    ui.sign_in(mine["token"])
    page = ui.goto("/ui/prompts?q=summar")
    ui_server.revoke(mine["id"])
    page.get_by_label("Search").fill("code")  # an htmx request: 401, and ui.js goes to the sign-in page
    expect(page.get_by_role("status").first).to_contain_text("Your session has ended")
    ui.check()
    sign_in_here(ui, ui_server.issue(who, ["viewer"])["token"])
    expect(page).to_have_url(re.compile(re.escape(ui.url("/ui/prompts?q=summar")) + "$"))
    ui.check()


def test_h_a_save_from_before_signing_in_again_in_another_tab_keeps_the_text(ui: UiPage, ui_server: UiServer) -> None:
    who, first = person(ui_server)
    name, _editor_path, page = open_new_prompt(ui, ui_server, first["token"])
    ui_server.revoke(first["id"])
    fill_template(page, "msg-0-text", "Typed in the old session, {{ who }}.")
    expect(page.locator("#session-ended")).to_contain_text("Your session ended.")

    other = ui.context.new_page()  # another tab of the same browser signs in again
    other.goto(ui.url("/ui/signin"))
    other.get_by_label("API token").fill(ui_server.issue(who, ["editor"])["token"])
    other.get_by_role("button", name="Sign in").click()
    expect(other.get_by_label("API token")).to_have_count(0)
    other.close()

    # This tab's form carries the old session's CSRF token: refused, and nothing typed is lost.
    page.get_by_role("button", name="Save version 2").click()
    expect(page.get_by_role("alert")).to_contain_text("Your edits were not saved; they are kept in this browser")
    ui.check()
    page.get_by_role("link", name="Open the editor again").click()
    expect(page.locator("#draft-offer")).to_contain_text(OFFER)
    page.get_by_role("button", name="Restore them").click()
    expect(page.locator("#msg-0-text")).to_have_value("Typed in the old session, {{ who }}.")
    page.get_by_role("button", name="Save version 2").click()
    expect(page.get_by_role("status").first).to_contain_text(f"Saved {name} v2")
    ui.check()


def test_i_write_only_header_values_never_go_into_the_browsers_storage(ui: UiPage, ui_server: UiServer) -> None:
    name = f"drafted-http-{secrets.token_hex(4)}"
    stored_secret, typed_secret = f"stored-{secrets.token_hex(8)}", f"typed-{secrets.token_hex(8)}"
    with ui_server.admin() as admin:
        made = admin.post(
            "/api/v1/resources",
            json={
                "name": name,
                "kind": "http",
                "uri": f"remote://{name}",
                "url": "http://127.0.0.1:9/doc",
                "headers": {"X-Token": stored_secret},
            },
        )
        assert made.status_code == 201, made.text
    ui.sign_in(ui_server.editor_token)
    page = ui.goto(f"/ui/resources/{name}/edit")
    accept_leaving(page)
    expect(page.get_by_label("Header 1 value")).to_have_value("********")
    page.get_by_role("button", name="Add header").click()
    ui.check()
    page.get_by_label("Header 2 name").fill("Authorization")
    page.get_by_label("Header 2 value").fill(typed_secret)
    page.get_by_label("Description", exact=True).fill("Typed last")
    page.wait_for_function("() => JSON.stringify(localStorage).includes('Typed last')")

    kept = page.evaluate("() => JSON.stringify(localStorage)")
    assert typed_secret not in kept, "a header value typed into an http resource's form went into localStorage"
    assert stored_secret not in kept
    fields = dict(
        page.evaluate(
            "() => Object.keys(localStorage).filter(k => k.startsWith('mcpr-draft:'))"
            ".flatMap(k => JSON.parse(localStorage.getItem(k)).fields)"
        )
    )
    assert fields["hdr-1-name"] == "Authorization"
    assert "hdr-1-value" not in fields
    assert fields["hdr-0-value"] == "********", "the mask (keep the stored value) is kept: there is no secret in it"
