"""The tokens page in a real browser (issue 25, item 8): a token gets one role, never a
contradictory mix; an existing token's teams change, and an MCP session with that token sees the
other team's entries on its very next request; "Last used" counts the web UI and says what it counts.

Every page is checked for console errors and by axe-core (``UiPage``).
"""

from __future__ import annotations

import os
import secrets
from datetime import datetime
from typing import Any

import httpx
import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.interop.mcp_wire import list_all
from tests.serve_process import issue_token
from tests.ui.conftest import UiPage, UiServer
from tests.waiting import wait_until

ROLES = ["agent", "viewer", "editor", "reviewer", "admin"]


def _token(admin: httpx.Client, token_id: int) -> dict[str, Any]:
    found: dict[str, Any] = next(t for t in admin.get("/api/v1/tokens").json()["items"] if t["id"] == token_id)
    return found


def test_a_token_gets_one_role_never_admin_and_agent(ui: UiPage, ui_server: UiServer) -> None:
    name = f"ui-role-{secrets.token_hex(3)}"
    ui.sign_in(ui_server.admin_token)
    ui.goto("/ui/tokens")
    page = ui.page
    roles = page.get_by_role("group", name="Role")
    expect(roles.get_by_role("checkbox")).to_have_count(0)
    expect(roles.get_by_role("radio")).to_have_count(len(ROLES))
    for role in ROLES:  # each described in a sentence, tied to its button
        expect(roles.get_by_role("radio", name=role, exact=True)).to_have_accessible_description(
            page.locator(f"#scope-{role}-help").inner_text()
        )
    expect(roles.get_by_role("radio", name="agent", exact=True)).to_have_accessible_description(
        "MCP only: an agent is served its token's label (none: production, or a ?label= that "
        "REGISTRY_AGENT_LABELS allows); no web UI, no admin API."
    )
    # Picking agent after admin leaves agent alone: there is no way to pick both.
    roles.get_by_role("radio", name="admin", exact=True).check()
    roles.get_by_role("radio", name="agent", exact=True).check()
    expect(roles.get_by_role("radio", name="admin", exact=True)).not_to_be_checked()
    assert page.locator('input[name="scopes"]:checked').count() == 1

    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Label (agent tokens)").fill("staging")
    page.get_by_role("button", name="Create token").click()
    ui.check()
    expect(page.get_by_role("heading", level=1)).to_have_text("Token created")
    expect(page.get_by_role("status").first).to_contain_text(f"Token {name} (agent, label staging)")
    ui.goto("/ui/tokens")
    row = page.locator("table.tokens tr", has_text=name)
    expect(row.locator("td").nth(1)).to_have_text("agent")
    ui.shot("tokens-roles")

    # A forged form with both: the service refuses it, saying why; nothing is made.
    csrf = ui.csrf_token()
    both = page.request.fetch(
        ui.url("/ui/tokens"),
        method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        data=f"csrf_token={csrf}&name={name}-mixed&scopes=admin&scopes=agent",
    )
    assert both.status == 422
    assert "scopes agent and admin contradict each other" in both.text()
    with ui_server.admin() as admin:
        assert not [t for t in admin.get("/api/v1/tokens").json()["items"] if t["name"] == f"{name}-mixed"]


def test_changing_a_tokens_teams_shows_its_agent_the_other_teams_entries_at_once(
    ui: UiPage, ui_server: UiServer
) -> None:
    suffix = secrets.token_hex(3)
    alpha, beta = f"alpha-{suffix}", f"beta-{suffix}"
    ours, theirs = f"ours-{suffix}", f"theirs-{suffix}"
    with ui_server.admin() as admin:
        for team in (alpha, beta):
            assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
        for prompt, team in ((ours, alpha), (theirs, beta)):
            body = {"name": prompt, "template": "Hi", "team": team}
            assert admin.post("/api/v1/prompts", json=body).status_code == 201, prompt
        made = issue_token(admin, f"agent-{suffix}", ["agent"], teams={alpha: "viewer"})
    agent = ui_server.mcp(made["token"])
    try:

        def listed() -> set[str]:
            return {p["name"] for p in list_all(agent, "prompts/list", "prompts")}

        assert ours in listed() and theirs not in listed()

        ui.sign_in(ui_server.admin_token)
        ui.goto("/ui/tokens")
        row = ui.page.locator("table.tokens tr", has_text=f"agent-{suffix}")
        row.get_by_role("link", name=f"Change the teams of agent-{suffix}").click()
        ui.check()
        page = ui.page
        expect(page.get_by_role("heading", level=1)).to_have_text(f"Teams of agent-{suffix}")
        expect(page.get_by_label("Team 1", exact=True)).to_have_value(alpha)
        page.get_by_label("Team 1", exact=True).select_option(beta)
        page.get_by_label("Role in team 1").select_option("viewer")
        ui.shot("token-teams")
        page.get_by_role("button", name="Save teams").click()
        ui.check()
        expect(page.get_by_role("status").first).to_contain_text(f"Token agent-{suffix} now belongs to {beta} (viewer)")
        expect(page.locator("table.tokens tr", has_text=f"agent-{suffix}")).to_contain_text(beta)

        # The same MCP session, on its very next request (no reconnect, no waiting out a cache).
        now = listed()
        assert theirs in now and ours not in now, now

        # A team that is not there (a stale form): refused at the form, saying so; nothing changes.
        ui.goto(f"/ui/tokens/{made['id']}/teams")
        csrf = ui.csrf_token()
        refused = page.request.post(
            ui.url(f"/ui/tokens/{made['id']}/teams"),
            form={"csrf_token": csrf, "team": "no-such-team", "role": "viewer"},
        )
        assert refused.status == 422 and "unknown team" in refused.text()
    finally:
        agent.http.close()
    with ui_server.admin() as admin:
        assert _token(admin, made["id"])["teams"] == {beta: "viewer"}
        events = admin.get("/api/v1/audit", params={"kind": "token", "action": "token_teams_changed"}).json()
        assert any(e["name"] == f"agent-{suffix}" for e in events["items"])


def test_last_used_counts_web_ui_use_and_says_what_it_counts(
    ui: UiPage, second_ui: UiPage, ui_server: UiServer
) -> None:
    name = f"ui-person-{secrets.token_hex(3)}"
    with ui_server.admin() as admin:
        made = issue_token(admin, name, ["viewer"])
        second_ui.sign_in(made["token"])
        signed_in_at = _token(admin, made["id"])["last_used_at"]
        assert signed_in_at is not None

        # Only pages of the web UI from here on: "last used" moves on (a few seconds apart at most).
        def used_since() -> bool:
            second_ui.page.reload()
            return bool(_token(admin, made["id"])["last_used_at"] > signed_in_at)

        wait_until(used_since, "a web UI page to count as a use of its token", timeout=30, interval=0.5)
        second_ui.check()
        now = _token(admin, made["id"])["last_used_at"]

    ui.sign_in(ui_server.admin_token)
    ui.goto("/ui/tokens")
    page = ui.page
    expect(page.locator("#last-used-help")).to_contain_text("web UI sign-in or page")
    cell = page.locator("table.tokens tr", has_text=name).locator("time")
    shown = cell.get_attribute("datetime")
    assert shown is not None and datetime.fromisoformat(shown) == datetime.fromisoformat(now.replace("Z", "+00:00"))
