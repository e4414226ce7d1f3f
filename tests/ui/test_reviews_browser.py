"""Change requests in the browser, on a server where production is protected
(``REGISTRY_PROTECTED_LABELS=production``): an editor's save opens a request instead of
publishing, another person (a reviewer, in a second browser context) approves and publishes it
from the review pages, and only then do agents get the new text. Every page is checked for
console errors, CSP violations and serious accessibility problems (``UiPage.check``); the review
forms also work without JavaScript."""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    from playwright.sync_api import Page, expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.serve_process import ServerProcess, issue_token
from tests.ui.conftest import UiPage, UiServer, fill_template


class GuardedServer(UiServer):
    """The UI test server's helpers, plus a reviewer's token."""

    def __init__(self, process: ServerProcess) -> None:
        super().__init__(process)
        with self.admin() as admin:
            self.reviewer_token = issue_token(admin, "ui-reviewer", ["reviewer"])["token"]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuardedServer]:
    """A server of its own (SQLite) whose production label is protected."""
    data = tmp_path_factory.mktemp("reviews-ui") / "data"
    env = {"REGISTRY_PROTECTED_LABELS": "production"}
    with ServerProcess(data, name="reviews-ui", env=env) as process:
        yield GuardedServer(process)


@pytest.fixture
def editor_page(browser: Any, guarded: GuardedServer, axe_source: str, screenshot_dir: Path) -> Iterator[UiPage]:
    context = browser.new_context(viewport={"width": 1366, "height": 860})
    try:
        yield UiPage(context, guarded, axe_source, screenshot_dir)
    finally:
        context.close()


@pytest.fixture
def reviewer_page(browser: Any, guarded: GuardedServer, axe_source: str, screenshot_dir: Path) -> Iterator[UiPage]:
    context = browser.new_context(viewport={"width": 1366, "height": 860})
    try:
        yield UiPage(context, guarded, axe_source, screenshot_dir)
    finally:
        context.close()


def published_prompt(server: GuardedServer, template: str) -> str:
    """A prompt whose v1 production serves (moved there by an admin's override, as setup)."""
    name = server.create_prompt(template, prefix="reviewed")
    with server.admin() as admin:
        moved = admin.put(f"/api/v1/prompts/{name}/labels/production", json={"version": 1, "override_reason": "setup"})
        assert moved.status_code == 200, moved.text
    return name


def open_editor(ui: UiPage, server: GuardedServer, name: str) -> Page:
    """The editor of ``name``, signed in as the server's editor."""
    ui.sign_in(server.editor_token)
    ui.goto(f"/ui/prompts/{name}/edit")
    return ui.page


def save_for_review(ui: UiPage, page: Page, template: str, note: str) -> str:
    """Type ``template`` and ``note`` into the open editor (other fields as the test left them)
    and save version 2, which opens a change request: its number, from the flash."""
    fill_template(page, "msg-0-text", template)
    page.get_by_label("Change note").fill(note)
    page.get_by_role("button", name="Save version 2").click()
    ui.check()
    flash = page.get_by_role("status").first
    match = re.search(r"change request #(\d+)", flash.inner_text())
    assert match, flash.inner_text()
    return match.group(1)


def test_an_editor_save_is_reviewed_and_published_by_someone_else(
    editor_page: UiPage, reviewer_page: UiPage, guarded: GuardedServer
) -> None:
    name = published_prompt(guarded, "Hello {{ who }}")
    assert guarded.prompt_text(name, {"who": "Ada"}) == "Hello Ada"

    # The editor saves: the form says production is protected and offers a review (checked).
    ui = editor_page
    page = open_editor(ui, guarded, name)
    expect(page.locator("#f-protected-help")).to_contain_text("production is protected")
    review_box = page.get_by_label("Request review to move production")
    expect(review_box).to_be_checked()
    request_id = save_for_review(ui, page, "Good day, {{ who }}!", "friendlier")
    expect(page.get_by_role("status").first).to_contain_text("production is protected")
    ui.shot("review-saved")
    # Agents still get the old text; the entry page links to the open request.
    assert guarded.prompt_text(name, {"who": "Ada"}) == "Hello Ada"
    page.get_by_role("link", name=f"#{request_id}: production → v2").click()
    ui.check()
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"#{request_id}")
    expect(page.get_by_text("You opened this request")).to_be_visible()
    assert page.get_by_role("button", name="Approve").count() == 0, "the author is offered no approval"

    # The reviewer, in another browser, finds it in the queue, approves and publishes.
    other = reviewer_page
    other.sign_in(guarded.reviewer_token)
    other.goto("/ui/reviews")
    other.page.get_by_role("link", name=re.compile(rf"#{request_id} ")).click()
    other.check()
    review = other.page
    expect(review.get_by_role("heading", name="Pre-publish checks")).to_be_visible()
    expect(review.locator(".field-diff").first).to_contain_text("Good day")
    other.shot("review-request")
    review.get_by_label("Comment (optional)").fill("Reads well")
    review.get_by_role("button", name="Approve", exact=True).click()
    other.check()
    expect(review.get_by_role("status").first).to_contain_text("Approved")
    assert guarded.prompt_text(name, {"who": "Ada"}) == "Hello Ada", "an approval publishes nothing"
    review.get_by_role("button", name="Publish to production").click()
    other.check()
    expect(review.get_by_role("status").first).to_contain_text("Published")
    expect(review.locator(".meta .badge").first).to_have_text("published")
    other.shot("review-published")

    assert guarded.prompt_text(name, {"who": "Ada"}) == "Good day, Ada!"


def test_the_review_forms_work_without_javascript(browser: Any, guarded: GuardedServer) -> None:
    name = published_prompt(guarded, "Hi {{ who }}")
    with guarded.admin() as admin:
        spec = admin.get(f"/api/v1/prompts/{name}").json()["spec"]
        saved = admin.put(
            f"/api/v1/prompts/{name}",
            json={
                **spec,
                "arguments": [*spec["arguments"], {"name": "tone", "required": True}],
                "request_review": True,
                "messages": [{"role": "user", "content": {"type": "text", "text": "Hi {{ who }} {{ tone }}"}}],
            },
        )
        assert saved.status_code == 200, saved.text
    request_id = saved.json()["change_requests"][0]
    context = browser.new_context(java_script_enabled=False, viewport={"width": 1366, "height": 860})
    try:
        page = context.new_page()
        page.goto(guarded.url + "/ui/signin")
        page.get_by_label("API token").fill(guarded.reviewer_token)
        page.get_by_role("button", name="Sign in").click()
        page.goto(guarded.url + f"/ui/reviews/{request_id}")
        expect(page.locator(".checks")).to_contain_text("required argument 'tone' was added")
        # Publishing is refused while the checks fail; a reason-less override is refused too.
        page.get_by_role("button", name="Approve", exact=True).click()
        page.get_by_role("button", name="Publish to production").click()
        expect(page.get_by_role("alert")).to_contain_text("checks fail")
        page.get_by_label("Why is it safe anyway?").fill("every caller sends a tone")
        page.get_by_role("button", name="Approve, overriding the checks").click()
        expect(page.get_by_role("status").first).to_contain_text("overriding")
        page.get_by_role("button", name="Publish to production").click()
        expect(page.get_by_role("status").first).to_contain_text("Published")
    finally:
        context.close()
    assert guarded.prompt_text(name, {"who": "Ada", "tone": "warmly"}) == "Hi Ada warmly"


def test_admins_manage_protected_labels(editor_page: UiPage, guarded: GuardedServer) -> None:
    ui = editor_page
    ui.sign_in(guarded.admin_token)
    ui.goto("/ui/labels")
    page = ui.page
    expect(page.get_by_role("table")).to_contain_text("REGISTRY_PROTECTED_LABELS")
    page.get_by_label("Label", exact=True).fill("canary")
    page.get_by_label("Approvals needed").fill("2")
    page.get_by_role("button", name="Protect").click()
    ui.check()
    expect(page.get_by_role("status").first).to_contain_text("canary is protected")
    page.get_by_role("button", name="Unprotect canary").click()
    ui.check()
    expect(page.get_by_role("status").first).to_contain_text("canary is no longer protected")
    ui.goto("/ui/reviews?state=all")


def test_promoting_to_a_protected_label_opens_a_request(editor_page: UiPage, guarded: GuardedServer) -> None:
    name = published_prompt(guarded, "Hey {{ who }}")
    with guarded.admin() as admin:
        saved = admin.patch(f"/api/v1/prompts/{name}", json={"template": "Hey there {{ who }}"})
        assert saved.status_code == 200 and saved.json()["held_labels"] == ["production"], saved.text
    ui = editor_page
    ui.sign_in(guarded.editor_token)
    ui.goto(f"/ui/prompts/{name}/promote?version=2&label=production")
    page = ui.page
    expect(page.locator("#protected-help")).to_contain_text("production is protected")
    page.get_by_label("Request title (optional)").fill("Everyone gets hey there")
    page.get_by_label("Why (for the reviewers, optional)").fill("ready for everyone")
    page.get_by_label("Publish when approved").check()
    page.get_by_role("button", name="Request review to point production at v2").click()
    ui.check()
    expect(page.get_by_role("status").first).to_contain_text("published as soon as they approve")
    expect(page.get_by_role("heading", level=1)).to_contain_text("Everyone gets hey there")
    expect(page.locator(".prose").first).to_have_text("ready for everyone")
    expect(page.locator(".meta")).to_contain_text("publish when approved")
    assert guarded.prompt_text(name, {"who": "Ada"}) == "Hey Ada"


# ------------------------------------------------------------------ issue 25 item 3: reviews with context


def team_tokens(server: GuardedServer, *roles: str) -> tuple[str, list[str]]:
    """A new team and a token per role in it (viewer scope only, so nothing outside the team
    counts for them): the team's name and the tokens."""
    team = "rv" + secrets.token_hex(3)
    with server.admin() as admin:
        assert admin.post("/api/v1/teams", json={"name": team, "title": "Reviewed"}).status_code == 201
        tokens = [
            issue_token(admin, f"{team}-{number}", ["viewer"], teams={team: role})["token"]
            for number, role in enumerate(roles)
        ]
    return team, tokens


def test_the_review_page_shows_what_the_author_typed_in_the_editor(
    editor_page: UiPage, reviewer_page: UiPage, guarded: GuardedServer
) -> None:
    name = published_prompt(guarded, "Hello {{ who }}")
    ui = editor_page
    page = open_editor(ui, guarded, name)
    page.get_by_label("Request title (optional)").fill("Warmer welcome")
    page.get_by_label("Request description (optional)").fill("Support asked for it after the survey.")
    request_id = save_for_review(ui, page, "Welcome, {{ who }}!", "warmer welcome for new customers")

    other = reviewer_page
    other.sign_in(guarded.reviewer_token)
    other.goto(f"/ui/reviews/{request_id}")
    review = other.page
    expect(review.get_by_role("heading", level=1)).to_have_text(f"#{request_id} Warmer welcome")
    context = review.locator(".cr-context")
    expect(context.locator(".prose").first).to_have_text("Support asked for it after the survey.")
    expect(review.locator("#cr-change-note")).to_have_text("warmer welcome for new customers")
    expect(context).to_contain_text("Change note of v2")
    expect(context).to_contain_text("by ui-editor")
    other.shot("review-context")


def test_reviewers_see_how_many_requests_wait_for_them(
    editor_page: UiPage, reviewer_page: UiPage, guarded: GuardedServer
) -> None:
    """The navigation and the home page count the requests waiting for the signed-in reviewer:
    not their own, and no longer once they approved."""
    team, (author, reviewer) = team_tokens(guarded, "reviewer", "reviewer")
    name = f"waiting-{secrets.token_hex(4)}"
    with guarded.admin() as admin:
        body = {"name": name, "template": "Hi {{ who }}", "team": team, "arguments": [{"name": "who"}]}
        assert admin.post("/api/v1/prompts", json=body).status_code == 201
    with guarded.process.client(author) as http:
        saved = http.put(
            f"/api/v1/prompts/{name}",
            json={"template": "Yo {{ who }}", "arguments": [{"name": "who"}], "request_review": True},
        )
        assert saved.status_code == 200, saved.text
    request_id = saved.json()["change_requests"][0]

    # The author of the only request: nothing waits for them.
    ui = editor_page
    ui.sign_in(author)
    nav = ui.page.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link", name="Reviews", exact=True)).to_be_visible()
    expect(ui.page.locator("#reviews-waiting")).to_contain_text("No change request waits for your review")

    # Another reviewer of the team: one, in the navigation (a badge, and words for screen readers) and on home.
    other = reviewer_page
    other.sign_in(reviewer)
    page = other.page
    link = page.get_by_role("navigation", name="Main").get_by_role("link", name=re.compile("1 waiting for your review"))
    expect(link).to_be_visible()
    expect(link.locator(".nav-count")).to_have_text("1")
    panel = page.locator("#reviews-waiting")
    expect(panel).to_contain_text("1 change request in review waits for your verdict")
    other.shot("review-waiting-home")
    panel.get_by_role("link", name="Review it").click()
    other.check()
    expect(page.get_by_role("table")).to_contain_text(f"#{request_id}")
    page.get_by_role("link", name=re.compile(rf"#{request_id} ")).click()
    other.check()
    page.get_by_role("button", name="Approve", exact=True).click()
    other.check()
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Reviews", exact=True)).to_be_visible()


def test_after_approving_approve_is_gone_and_the_page_says_so(
    editor_page: UiPage, reviewer_page: UiPage, guarded: GuardedServer
) -> None:
    name = published_prompt(guarded, "Hello {{ who }}")
    with guarded.admin() as admin:
        spec = admin.get(f"/api/v1/prompts/{name}").json()["spec"]
        body = {**spec, "template": "Howdy {{ who }}", "request_review": True}
        body.pop("messages", None)
    with guarded.process.client(guarded.editor_token) as http:
        saved = http.put(f"/api/v1/prompts/{name}", json=body)
        assert saved.status_code == 200, saved.text
    request_id = saved.json()["change_requests"][0]

    other = reviewer_page
    other.sign_in(guarded.reviewer_token)
    other.goto(f"/ui/reviews/{request_id}")
    page = other.page
    page.get_by_role("button", name="Approve", exact=True).click()
    other.check()
    expect(page.get_by_role("status").first).to_contain_text("Approved")
    expect(page.locator("#your-verdict")).to_contain_text("You approved this")
    expect(page.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    expect(page.get_by_role("button", name="Reject")).to_be_visible()  # a reviewer may still change their mind
    other.shot("review-approved")
    page.get_by_role("button", name="Publish to production").click()
    other.check()
    expect(page.get_by_role("status").first).to_contain_text("Published")
    # A published request offers no actions at all.
    expect(page.locator("aside.actions").get_by_role("button")).to_have_count(0)
    expect(page.locator("#no-actions")).to_contain_text("published: nothing more to do")


def test_publish_when_approved_serves_agents_on_the_approval(
    editor_page: UiPage, reviewer_page: UiPage, guarded: GuardedServer
) -> None:
    name = published_prompt(guarded, "Hello {{ who }}")
    ui = editor_page
    page = open_editor(ui, guarded, name)
    page.get_by_label("Publish when approved").check()
    request_id = save_for_review(ui, page, "Greetings, {{ who }}.", "formal")
    assert guarded.prompt_text(name, {"who": "Ada"}) == "Hello Ada"

    other = reviewer_page
    other.sign_in(guarded.reviewer_token)
    other.goto(f"/ui/reviews/{request_id}")
    review = other.page
    expect(review.locator(".meta")).to_contain_text("publish when approved")
    expect(review.locator("#approve-publishes")).to_contain_text("your approval publishes it")
    review.get_by_role("button", name="Approve", exact=True).click()
    other.check()
    expect(review.get_by_role("status").first).to_contain_text("Approved and published")
    expect(review.locator(".meta .badge").first).to_have_text("published")
    # No separate publication: an MCP client is served the new version now.
    assert guarded.prompt_text(name, {"who": "Ada"}) == "Greetings, Ada."


def test_the_editors_save_options_say_what_happens(editor_page: UiPage, guarded: GuardedServer) -> None:
    name = published_prompt(guarded, "Hello {{ who }}")
    ui = editor_page
    ui.sign_in(guarded.editor_token)
    ui.goto(f"/ui/prompts/{name}/edit")
    page = ui.page
    production = page.get_by_role("radio", name=re.compile("^production"))
    expect(production).to_have_accessible_name(
        "production — protected: saving creates the version; agents served production keep the current one "
        "until a reviewer approves the change request and it is published"
    )
    expect(page.get_by_role("radio", name=re.compile("^staging"))).to_have_accessible_name(
        "staging only — agents reading staging get it at once; production keeps serving its current version"
    )
    page.locator("fieldset.save").scroll_into_view_if_needed()
    ui.shot("editor-save-options")
