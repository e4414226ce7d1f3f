"""``/ui/teams`` (admin): list teams, create one, delete an empty one; and the team choices the
other pages offer (a list's filter, a new entry's owner, an entry's move).

Like the REST routes, these only pick the page: ``registry.catalog.teams.TeamService`` checks
who may do what and appends each change to the audit trail.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from registry.api.deps import TeamsDep, get_registry
from registry.catalog.errors import CatalogError
from registry.catalog.teams import TEAM_PATTERN, TEAM_TITLE_CHARS, TeamService
from registry.catalog.web_sessions import SignedIn
from registry.ui.auth import Admin, AdminForm, is_https
from registry.ui.templating import Pages, PagesDep, set_flash

TeamName = Annotated[str, Path(pattern=f"^{TEAM_PATTERN}$", max_length=64)]


def _teams(request: Request) -> TeamService:
    return get_registry(request).teams


def visible_teams(request: Request, ui: SignedIn) -> list[str]:
    """The teams whose entries ``ui`` sees (every team for an admin), by name: a list's filter."""
    if ui.is_admin:
        return _teams(request).names()
    return sorted(team for team, _role in ui.principal.teams)


def team_choices(request: Request, ui: SignedIn) -> list[str | None]:
    """Where ``ui`` may put an entry (None: global): an admin anywhere; others where they are
    editors (global ones with the editor scope)."""
    if ui.is_admin:
        return [None, *_teams(request).names()]
    return ui.edit_teams


router = APIRouter(prefix="/teams")


def teams_page(
    pages: Pages,
    teams: TeamService,
    request: Request,
    *,
    values: dict[str, Any] | None = None,
    error: str | None = None,
    status: int = 200,
) -> Response:
    context = {
        "title": "Teams",
        "nav": "teams",
        "teams": teams.list_teams(),
        "values": values or {"name": "", "title": ""},
        "error": error,
        "title_chars": TEAM_TITLE_CHARS,
    }
    return pages.render(request, "teams.html", context, status=status)


def redirect(request: Request, notice: str) -> Response:
    response = RedirectResponse("/ui/teams", status_code=303)
    set_flash(response, notice, secure=is_https(request))
    return response


@router.get("")
def list_teams(request: Request, ui: Admin, pages: PagesDep, teams: TeamsDep) -> Response:
    return teams_page(pages, teams, request)


@router.post("")
async def create_team(request: Request, form: AdminForm, pages: PagesDep, teams: TeamsDep) -> Response:
    ui, fields = form
    name, title = (_text(fields.get(key)) for key in ("name", "title"))
    try:
        info = await run_in_threadpool(
            teams.create, name, title or None, actor=ui.principal.actor(), access=ui.principal
        )
    except CatalogError as exc:
        detail, status = exc.detail, exc.status
        values = {"name": name, "title": title}
        return await run_in_threadpool(
            lambda: teams_page(pages, teams, request, values=values, error=detail, status=status)
        )
    return redirect(request, f"Team {info['name']} is created.")


@router.get("/{team}/delete")
def delete_confirm(request: Request, ui: Admin, pages: PagesDep, teams: TeamsDep, team: TeamName) -> Response:
    info = teams.get(team, ui.principal)
    context = {"title": f"Delete team {team}?", "nav": "teams", "team": info}
    return pages.render(request, "confirm_team_delete.html", context)


@router.post("/{team}/delete")
async def delete_team(request: Request, form: AdminForm, teams: TeamsDep, team: TeamName) -> Response:
    ui, _fields = form
    info = await run_in_threadpool(teams.delete, team, actor=ui.principal.actor(), access=ui.principal)
    return redirect(request, f"Team {info['name']} is deleted.")


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""
