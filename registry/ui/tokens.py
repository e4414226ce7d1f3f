"""``/ui/tokens`` (admin): create a token (its value shown once), list them, change a token's
teams, revoke one.

The value of a new token is on the answer to the POST only: it is never stored (only its hash)
and the page is ``no-store``, so going back or reloading does not show it again.

The form offers one role (a radio group sent as the one ``scopes`` value): the API's scope list
allows mixes, of which ``agent`` + anything is a contradiction the service refuses; a token made
before that rule is listed with the role it acts as and its scopes as stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from registry.api.deps import TeamsDep, TokensDep
from registry.catalog.errors import CatalogError, Invalid, NotFound
from registry.tokens import SCOPE_DESCRIPTIONS, SCOPES, TEAM_ROLES, TokenService, acts_as
from registry.ui.auth import Admin, AdminForm
from registry.ui.errors import error_page
from registry.ui.views import View

#: Longest expiry offered (days); the service accepts any future instant.
MAX_EXPIRY_DAYS = 3650
#: Empty team-membership rows the creation form offers (more: submit, and it comes back with more).
BLANK_TEAM_ROWS = 3
#: Most team memberships one token may have (as ``registry.tokens.check_teams`` says).
MAX_TEAM_ROWS = 256
TokenId = Annotated[int, Path(ge=1, le=2**63 - 1)]


@dataclass
class TokenPages(View):
    """The token pages (the teams offered for memberships too)."""

    tokens: TokensDep
    teams: TeamsDep

    def tokens_page(
        self, *, values: dict[str, Any] | None = None, error: str | None = None, status: int = 200
    ) -> Response:
        items = self.tokens.list_tokens()
        items.reverse()  # newest first
        for item in items:
            item["acts_as"] = acts_as(item["scopes"])
        shown = values or {"name": "", "scopes": [], "label": "", "expires_in_days": "", "teams": []}
        context = {
            "title": "Tokens",
            "nav": "tokens",
            "tokens": items,
            "scopes": SCOPES,
            "scope_descriptions": SCOPE_DESCRIPTIONS,
            "cache_seconds": TokenService.CACHE_SECONDS,
            "values": shown,
            "error": error,
            "max_days": MAX_EXPIRY_DAYS,
            "team_names": self.teams.names(),
            "team_roles": TEAM_ROLES,
            # The memberships sent back (after a refusal), then a few empty rows.
            "team_rows": [*shown["teams"], *([("", "viewer")] * BLANK_TEAM_ROWS)],
        }
        return self.render("tokens.html", context, status=status)

    def teams_page(
        self, token: dict[str, Any], rows: list[tuple[str, str]], *, error: str | None = None, status: int = 200
    ) -> Response:
        context = {
            "title": f"Teams of token {token['name']}",
            "nav": "tokens",
            "token": token,
            "error": error,
            "team_names": self.teams.names(),
            "team_roles": TEAM_ROLES,
            "team_rows": [*rows, *([("", "viewer")] * BLANK_TEAM_ROWS)],
        }
        return self.render("token_teams.html", context, status=status)

    def find(self, token_id: int) -> dict[str, Any] | None:
        return next((t for t in self.tokens.list_tokens() if t["id"] == token_id), None)

    def not_found(self, token_id: int) -> Response:
        return error_page(self.pages, self.request, 404, f"There is no token {token_id}.")


TokenPagesDep = Annotated[TokenPages, Depends()]
router = APIRouter(prefix="/tokens")


@router.get("")
def list_tokens(ui: Admin, pages: TokenPagesDep) -> Response:
    return pages.tokens_page()


@router.post("")
async def create_token(form: AdminForm, pages: TokenPagesDep) -> Response:
    ui, fields = form
    name, label, days = (_text(fields.get(key)) for key in ("name", "label", "expires_in_days"))
    scopes = [s for s in fields.getlist("scopes") if isinstance(s, str)]
    rows = _team_rows(fields.getlist("team"), fields.getlist("role"))
    values = {"name": name, "scopes": scopes, "label": label, "expires_in_days": days, "teams": rows}
    try:
        expires_at = _expiry(days)
        teams = _memberships(rows)
        token, info = await run_in_threadpool(
            pages.tokens.create,
            name,
            scopes,
            label=label or None,
            created_by=ui.principal.name,
            expires_at=expires_at,
            teams=teams,
            actor=ui.principal.actor(),
        )
    except CatalogError as exc:
        detail = exc.detail
        return await run_in_threadpool(lambda: pages.tokens_page(values=values, error=detail, status=422))
    context = {"title": "Token created", "nav": "tokens", "token": token, "info": info}
    return pages.render("token_created.html", context, status=201)


@router.get("/{token_id}/teams")
def teams_form(ui: Admin, pages: TokenPagesDep, token_id: TokenId) -> Response:
    found = pages.find(token_id)
    if found is None:
        return pages.not_found(token_id)
    return pages.teams_page(found, sorted(found["teams"].items()))


@router.post("/{token_id}/teams")
async def set_teams(form: AdminForm, pages: TokenPagesDep, token_id: TokenId) -> Response:
    ui, fields = form
    rows = _team_rows(fields.getlist("team"), fields.getlist("role"))
    try:
        teams = _memberships(rows)
        info = await run_in_threadpool(lambda: pages.tokens.set_teams(token_id, teams, actor=ui.principal.actor()))
    except NotFound:
        return await run_in_threadpool(pages.not_found, token_id)
    except CatalogError as exc:
        detail, status = exc.detail, exc.status
        found = await run_in_threadpool(pages.find, token_id)
        if found is None:
            return await run_in_threadpool(pages.not_found, token_id)
        return await run_in_threadpool(lambda: pages.teams_page(found, rows, error=detail, status=status))
    described = ", ".join(f"{team} ({role})" for team, role in sorted(info["teams"].items())) or "no team"
    return pages.redirect(
        "/ui/tokens",
        f"Token {info['name']} now belongs to {described}: its agents and sessions see that from their next request.",
    )


@router.get("/{token_id}/revoke")
def revoke_confirm(ui: Admin, pages: TokenPagesDep, token_id: TokenId) -> Response:
    found = pages.find(token_id)
    if found is None:
        return pages.not_found(token_id)
    context = {
        "title": f"Revoke token {found['name']}?",
        "nav": "tokens",
        "token": found,
        "own": found["id"] == ui.principal.token_id,
    }
    return pages.render("confirm_revoke.html", context)


@router.post("/{token_id}/revoke")
async def revoke(form: AdminForm, pages: TokenPagesDep, token_id: TokenId) -> Response:
    ui, _fields = form
    info = await run_in_threadpool(lambda: pages.tokens.revoke(token_id, actor=ui.principal.actor()))
    return pages.redirect("/ui/tokens", f"Token {info['name']} is revoked: it is refused from now on.")


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def _team_rows(teams: list[Any], roles: list[Any]) -> list[tuple[str, str]]:
    """The form's (team, role) rows that name a team, in order (at most ``MAX_TEAM_ROWS`` + 1,
    so one too many is refused rather than cut)."""
    rows = [(_text(team), _text(role)) for team, role in zip(teams, roles, strict=False)]
    return [row for row in rows if row[0]][: MAX_TEAM_ROWS + 1]


def _memberships(rows: list[tuple[str, str]]) -> dict[str, str]:
    """Team -> role; a team named twice is refused (which role was meant?)."""
    if len(rows) > MAX_TEAM_ROWS:
        raise Invalid(f"a token may belong to at most {MAX_TEAM_ROWS} teams")
    memberships: dict[str, str] = {}
    for team, role in rows:
        if team in memberships:
            raise Invalid(f"team {team!r} is named twice: give it one role")
        memberships[team] = role
    return memberships


def _expiry(days: str) -> datetime | None:
    if not days:
        return None
    if not days.isdigit() or not 1 <= int(days) <= MAX_EXPIRY_DAYS:
        raise Invalid(f"expiry must be a whole number of days from 1 to {MAX_EXPIRY_DAYS} (got {days!r})")
    return datetime.now(UTC) + timedelta(days=int(days))
