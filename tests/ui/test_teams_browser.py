"""Teams in the web UI, in a real browser: an admin makes a team and a member token; the member
signs in, sees global entries and their team's (never another team's), edits only their team's,
and creates an entry in it. Every page is checked for errors and accessibility (``UiPage``)."""

from __future__ import annotations

import os
import secrets
from typing import Any

import httpx
import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.factories import prompt_body
from tests.http import TLS
from tests.ui.conftest import UiPage, UiServer, csrf_of, fill_template, sign_in


def test_a_team_editor_sees_and_edits_only_global_and_own_entries(
    ui: UiPage, second_ui: UiPage, ui_server: UiServer
) -> None:
    suffix = secrets.token_hex(3)
    team, other = f"ui-team-{suffix}", f"ui-other-{suffix}"
    ours, theirs, shared = f"ours-{suffix}", f"theirs-{suffix}", f"shared-{suffix}"

    # The admin: two teams (one through the form), and an entry in each plus a global one.
    ui.sign_in(ui.server.admin_token)
    ui.goto("/ui/teams")
    ui.page.get_by_label("Name", exact=True).fill(team)
    ui.page.get_by_label("Title", exact=True).fill("Browser team")
    ui.page.get_by_role("button", name="Create team").click()
    ui.check()
    expect(ui.page.get_by_role("status").first).to_contain_text(f"Team {team} is created")
    expect(ui.page.get_by_role("table", name="Every team, by name")).to_contain_text("Browser team")
    ui.shot("teams")
    with ui_server.admin() as admin:
        assert admin.post("/api/v1/teams", json={"name": other}).status_code == 201
        for name, owner in ((ours, team), (theirs, other), (shared, None)):
            made = admin.post("/api/v1/prompts", json=prompt_body(name, team=owner))
            assert made.status_code == 201, made.text

    # A token with viewer scope and the editor role in the team, through the tokens form.
    ui.goto("/ui/tokens")
    ui.page.get_by_label("Name", exact=True).fill(f"member-{suffix}")
    ui.page.get_by_label("viewer", exact=True).check()
    ui.page.get_by_label("Team 1", exact=True).select_option(team)
    ui.page.get_by_label("Role in team 1").select_option("editor")
    ui.page.get_by_role("button", name="Create token").click()
    ui.check()
    token = ui.page.get_by_label("Token value").input_value()
    ui.goto("/ui/tokens")
    expect(ui.page.locator("tr", has_text=f"member-{suffix}")).to_contain_text(team)

    # The member: global and own team's entries, never the other team's.
    member = second_ui
    member.sign_in(token)
    # (Searched: the shared test server holds more than a page of prompts made by other tests.)
    member.goto("/ui/prompts?q=summarize")
    expect(member.page.get_by_role("link", name="summarize", exact=True)).to_be_visible()  # the demo's, global
    member.goto(f"/ui/prompts?q={suffix}")
    expect(member.page.get_by_role("link", name=ours, exact=True)).to_be_visible()
    expect(member.page.get_by_role("link", name=shared, exact=True)).to_be_visible()
    expect(member.page.get_by_role("link", name=theirs, exact=True)).to_have_count(0)
    expect(member.page.locator("tr", has_text=ours).locator(".badge.team")).to_have_text(team)
    member.shot("teams-member-list")
    # The team filter offers their team only, and narrows the list to it.
    options = member.page.get_by_label("Team", exact=True).locator("option").all_inner_texts()
    assert options == ["Any", "Global only", team]
    member.goto(f"/ui/prompts?team={team}")
    expect(member.page.get_by_role("link", name=ours, exact=True)).to_be_visible()
    expect(member.page.get_by_role("link", name=shared, exact=True)).to_have_count(0)
    # Another team's entry is missing, as an unknown name is.
    member.goto(f"/ui/prompts/{theirs}", status=404)
    member.goto(f"/ui/prompts/{theirs}/history", status=404)

    # Their team's entry has edit controls; a global one does not (editor in the team only).
    member.goto(f"/ui/prompts/{ours}")
    expect(member.page.locator(".team-line")).to_contain_text(team)
    expect(member.page.get_by_role("link", name="Edit", exact=True)).to_be_visible()
    expect(member.page.get_by_role("link", name="Move to team…")).to_be_visible()
    member.goto(f"/ui/prompts/{shared}")
    expect(member.page.locator(".team-line")).to_contain_text("global")
    expect(member.page.get_by_role("link", name="Edit", exact=True)).to_have_count(0)
    expect(member.page.get_by_role("heading", name="Promote")).to_have_count(0)
    member.goto(f"/ui/prompts/{shared}/edit", status=403)

    # A new prompt: the only place offered is their team.
    created = f"made-{suffix}"
    member.goto("/ui/prompts")
    member.page.get_by_role("link", name="New prompt").click()
    member.check()
    page = member.page
    assert page.get_by_label("Team", exact=True).locator("option").all_inner_texts() == [team]
    page.get_by_label("Name", exact=True).fill(created)
    fill_template(page, "msg-0-text", "Hello from the team")
    page.get_by_role("button", name="Create").click()
    member.check()
    expect(page.get_by_role("status").first).to_contain_text(f"Created {created} v1")
    expect(page.locator(".team-line")).to_contain_text(team)
    member.shot("teams-member-created")
    with ui_server.admin() as admin:
        saved = admin.get(f"/api/v1/prompts/{created}").json()
    assert saved["team"] == team and saved["author"] == f"member-{suffix}"
    # Agents without the team do not see it; the admin's list does.
    assert created not in ui_server.prompt_names()
    ui.goto(f"/ui/prompts?team={team}")
    expect(ui.page.get_by_role("link", name=created, exact=True)).to_be_visible()

    # A move needs the form's CSRF token; the admin moves "ours" to the other team through the
    # confirmation page, and the member no longer sees it.
    forged = member.context.request.post(member.url(f"/ui/prompts/{ours}/team"), form={"team": ""})
    assert forged.status == 403
    ui.goto(f"/ui/prompts/{ours}")
    ui.page.get_by_role("link", name="Move to team…").click()
    ui.check()
    ui.page.get_by_label("New team").select_option(other)
    ui.page.get_by_label("Reason (optional)").fill("the other team owns it now")
    ui.page.get_by_role("button", name=f"Move {ours}").click()
    ui.check()
    expect(ui.page.get_by_role("status").first).to_contain_text(f"{ours} now belongs to team {other}")
    expect(ui.page.locator(".team-line")).to_contain_text(other)
    member.goto(f"/ui/prompts/{ours}", status=404)
    moved: list[dict[str, Any]] = []
    after = 0
    with ui_server.admin() as admin:
        while page := admin.get("/api/v1/changes", params={"after": after, "limit": 1000}).json()["items"]:
            moved += [c for c in page if c["name"] == ours]
            after = page[-1]["id"]
    assert moved[-1]["action"] == "team_moved" and sorted(moved[-1]["audience"]) == sorted([team, other])


def test_team_pages_are_for_admins_and_refuse_what_the_service_refuses(ui_server: UiServer) -> None:
    """Over plain HTTP: the teams page is the admin's; an empty team is deleted through its
    confirmation form (CSRF-checked); a busy one is refused; the tokens form checks its rows."""
    suffix = secrets.token_hex(3)
    empty, busy = f"ui-empty-{suffix}", f"ui-busy-{suffix}"
    with ui_server.admin() as admin:
        for team in (empty, busy):
            assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
        assert admin.post("/api/v1/prompts", json=prompt_body(f"busy-{suffix}", team=busy)).status_code == 201
    with httpx.Client(base_url=ui_server.url, timeout=30, verify=TLS) as viewer:
        assert sign_in(viewer, ui_server.viewer_token).status_code == 303
        assert viewer.get("/ui/teams").status_code == 403
    with httpx.Client(base_url=ui_server.url, timeout=30, verify=TLS) as http:
        assert sign_in(http, ui_server.admin_token).status_code == 303
        csrf = csrf_of(http, f"/ui/teams/{empty}/delete")
        assert http.post(f"/ui/teams/{empty}/delete", data={}).status_code == 403  # no CSRF token
        done = http.post(f"/ui/teams/{empty}/delete", data={"csrf_token": csrf})
        assert done.status_code == 303 and done.headers["location"] == "/ui/teams"
        assert f"Team {empty} is deleted" in http.get("/ui/teams").text
        confirm = http.get(f"/ui/teams/{busy}/delete")
        assert confirm.status_code == 200 and "still owns 1 entry" in confirm.text
        refused = http.post(f"/ui/teams/{busy}/delete", data={"csrf_token": csrf})
        assert refused.status_code == 409 and "still owns 1 entry" in refused.text
        twice = http.post(
            "/ui/tokens",
            data={
                "csrf_token": csrf,
                "name": "twice",
                "scopes": "viewer",
                "team": [busy, busy],
                "role": ["viewer", "editor"],
            },
        )
        assert twice.status_code == 422 and "named twice" in twice.text
        duplicate = http.post("/ui/teams", data={"csrf_token": csrf, "name": busy})
        assert duplicate.status_code == 409 and "already exists" in duplicate.text
