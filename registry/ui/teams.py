"""``/ui/teams`` (admin): list teams, create one, delete an empty one; and the team choices the
other pages offer (a list's filter, a new entry's owner, an entry's move).

Like the REST routes, these only pick the page: ``registry.catalog.teams.TeamService`` checks
who may do what and appends each change to the audit trail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from registry.api.deps import TeamsDep, get_registry
from registry.catalog.errors import CatalogError
from registry.catalog.teams import TEAM_PATTERN, TEAM_TITLE_CHARS
from registry.catalog.web_sessions import SignedIn
from registry.ui.auth import Admin, AdminForm, form_field
from registry.ui.views import View

TeamName = Annotated[str, Path(pattern=f"^{TEAM_PATTERN}$", max_length=64)]


def visible_teams(request: Request, ui: SignedIn) -> list[str]:
    """The teams whose entries ``ui`` sees (every team for an admin), by name: a list's filter."""
    if ui.is_admin:
        return get_registry(request).teams.names()
    return sorted(team for team, _role in ui.principal.teams)


def team_choices(request: Request, ui: SignedIn) -> list[str | None]:
    """Where ``ui`` may put an entry (None: global): an admin anywhere; others where they are
    editors (global ones with the editor scope)."""
    if ui.is_admin:
        return [None, *get_registry(request).teams.names()]
    return ui.edit_teams


@dataclass
class TeamPages(View):
    teams: TeamsDep

    def teams_page(
        self, *, values: dict[str, Any] | None = None, error: str | None = None, status: int = 200
    ) -> Response:
        context = {
            "title": "Teams",
            "nav": "teams",
            "teams": self.teams.list_teams(),
            "values": values or {"name": "", "title": ""},
            "error": error,
            "title_chars": TEAM_TITLE_CHARS,
        }
        return self.render("teams.html", context, status=status)


TeamPagesDep = Annotated[TeamPages, Depends()]
router = APIRouter(prefix="/teams")


@router.get("")
def list_teams(ui: Admin, pages: TeamPagesDep) -> Response:
    return pages.teams_page()


@router.post("")
async def create_team(form: AdminForm, pages: TeamPagesDep) -> Response:
    ui, fields = form
    name, title = (form_field(fields, key) for key in ("name", "title"))
    try:
        info = await run_in_threadpool(
            pages.teams.create, name, title or None, actor=ui.principal.actor(), access=ui.principal
        )
    except CatalogError as exc:
        detail, status = exc.detail, exc.status
        values = {"name": name, "title": title}
        return await run_in_threadpool(lambda: pages.teams_page(values=values, error=detail, status=status))
    return pages.redirect("/ui/teams", f"Team {info['name']} is created.")


@router.get("/{team}/delete")
def delete_confirm(ui: Admin, pages: TeamPagesDep, team: TeamName) -> Response:
    info = pages.teams.get(team, ui.principal)
    context = {"title": f"Delete team {team}?", "nav": "teams", "team": info}
    return pages.render("confirm_team_delete.html", context)


@router.post("/{team}/delete")
async def delete_team(form: AdminForm, pages: TeamPagesDep, team: TeamName) -> Response:
    ui, _fields = form
    info = await run_in_threadpool(pages.teams.delete, team, actor=ui.principal.actor(), access=ui.principal)
    return pages.redirect("/ui/teams", f"Team {info['name']} is deleted.")
