"""What the web UI shows about entries of teams someone cannot see, or may see but not change
(issue 25 review): a hidden change request's page is the missing one's, links included (the
error pages of item 7 link what a refusal is about), and "Restore vN" is refused where the person
may not edit, before a confirmation they could never act on."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import httpx
import pytest

from tests.http import TLS
from tests.serve_process import issue_token
from tests.ui.conftest import UiServer, sign_in


@pytest.fixture
def team_prompt(ui_server: UiServer) -> Iterator[tuple[str, str]]:
    """A team of its own and a prompt (two versions) it owns: (team, prompt name)."""
    suffix = secrets.token_hex(3)
    team, name = f"hidden-{suffix}", f"hidden-prompt-{suffix}"
    body = {"name": name, "arguments": [{"name": "who"}], "template": "Hi {{ who }}"}
    with ui_server.admin() as admin:
        assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
        assert admin.post("/api/v1/prompts", json={**body, "team": team}).status_code == 201
        saved = admin.put(f"/api/v1/prompts/{name}", json={**body, "template": "Hello {{ who }}"})
        assert saved.status_code == 200, saved.text
    yield team, name


def test_a_hidden_change_request_answers_as_a_missing_one(
    ui_server: UiServer, editor: httpx.Client, team_prompt: tuple[str, str], guarded_label: str
) -> None:
    _team, name = team_prompt
    with ui_server.admin() as admin:
        opened = admin.post(
            "/api/v1/change-requests", json={"kind": "prompt", "name": name, "label": guarded_label, "to_version": 2}
        )
        assert opened.status_code == 201, opened.text
    hidden_id = opened.json()["id"]
    missing_id = hidden_id + 1_000_000

    # "ui-editor" is in no team: the request about the team's prompt is not theirs to see.
    hidden = editor.get(f"/ui/reviews/{hidden_id}")
    missing = editor.get(f"/ui/reviews/{missing_id}")
    assert hidden.status_code == missing.status_code == 404
    assert 'href="/ui/reviews?state=all"' in missing.text
    assert hidden.text.replace(f"#{hidden_id}", "#N") == missing.text.replace(f"#{missing_id}", "#N")


def test_restoring_a_version_is_refused_where_the_person_may_not_edit(
    ui_server: UiServer, team_prompt: tuple[str, str]
) -> None:
    team, name = team_prompt
    with ui_server.admin() as admin:
        # An editor of global entries who only reads the team's.
        member = issue_token(admin, f"reader-{secrets.token_hex(3)}", ["editor"], teams={team: "viewer"})
    with httpx.Client(base_url=ui_server.url, timeout=30, verify=TLS) as http:
        assert sign_in(http, member["token"]).status_code == 303
        assert http.get(f"/ui/prompts/{name}?version=1").status_code == 200
        confirm = http.get(f"/ui/prompts/{name}/versions/1/restore")
        assert confirm.status_code == 403, confirm.text[:500]
        assert "needs the editor role on team" in confirm.text
        assert 'action="/ui/prompts/' not in confirm.text
    with httpx.Client(base_url=ui_server.url, timeout=30, verify=TLS) as http:
        assert sign_in(http, ui_server.editor_token).status_code == 303
        # Not a member at all: as if there were no such prompt.
        assert http.get(f"/ui/prompts/{name}/versions/1/restore").status_code == 404
