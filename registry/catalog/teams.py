"""Teams: who owns which entries.

An entry belongs to one team or to nobody (global, seen by everyone); tokens and single-sign-on
users belong to teams with a role (``registry.tokens.TEAM_ROLES``). Only admins create, rename
and delete teams. A team is deleted only while no entry (archived ones included) belongs to it,
so no entry ever names a team that does not exist; the tokens' memberships of a deleted team go
with it. Every change is appended to the change log as a ``team`` event (``append_event``), so
it is part of the hash-chained audit trail, and sent to no agent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Text, cast, func, select
from sqlalchemy.orm import Session

from registry.catalog.access import Access
from registry.catalog.errors import Conflict, Forbidden, Invalid, NotFound
from registry.db.audit import Actor
from registry.db.changelog import append_event
from registry.db.engine import Database
from registry.db.models import ApiToken, Entry, Team

#: Team names: like labels, 1-64 of [a-z0-9_.-], starting with a letter or digit. ``registry.tokens``
#: takes it from here (the catalog does not import tokens).
TEAM_PATTERN = r"[a-z0-9][a-z0-9_.-]{0,63}"
#: Longest team title.
TEAM_TITLE_CHARS = 256
#: ``list_entries(team=GLOBAL_ONLY)``: only global entries (no team name can be ``-``).
GLOBAL_ONLY = "-"


def is_team_name(value: object) -> bool:
    return isinstance(value, str) and re.fullmatch(TEAM_PATTERN, value) is not None


def check_team_name(value: object) -> str:
    """``value`` if it is a valid team name; otherwise ``Invalid`` saying what one is."""
    if not is_team_name(value):
        raise Invalid(f"invalid team name {value!r}: use 1-64 of [a-z0-9_.-], starting with a letter or digit")
    assert isinstance(value, str)
    return value


def is_admin(access: Access | None) -> bool:
    """The system (None) or an admin: may manage teams and sees every team's entries."""
    return access is None or access.may("admin", None)


def check_admin(access: Access | None, what: str) -> None:
    if not is_admin(access):
        raise Forbidden(f"{what}: this needs the admin scope")


def require_team(session: Session, team: str, *, lock: bool = False) -> Team:
    """The team row (``lock``: held against a concurrent delete until commit); ``Invalid`` when
    there is no such team (a team named in a body, not in the URL)."""
    stmt = select(Team).where(Team.name == team)
    if lock:
        stmt = stmt.with_for_update(read=True)
    row = session.scalar(stmt)
    if row is None:
        raise Invalid(f"team {team!r} does not exist (an admin creates teams: POST /api/v1/teams)")
    return row


def missing_teams(session: Session, names: Iterable[str]) -> list[str]:
    """Which of ``names`` are not teams, sorted."""
    wanted = set(names)
    if not wanted:
        return []
    found = set(session.scalars(select(Team.name).where(Team.name.in_(sorted(wanted)))))
    return sorted(wanted - found)


def _check_title(title: str | None) -> str | None:
    if title is None:
        return None
    title = title.strip()
    if len(title) > TEAM_TITLE_CHARS:
        raise Invalid(f"title has {len(title)} characters; at most {TEAM_TITLE_CHARS}")
    return title or None


class TeamService:
    """Lists, creates, renames and deletes teams (``access`` None: the system, which may all)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @staticmethod
    def _as_dict(team: Team, entries: int, tokens: int) -> dict[str, Any]:
        return {
            "name": team.name,
            "title": team.title,
            "created_by": team.created_by,
            "created_at": team.created_at.isoformat(),
            "entries": entries,
            "tokens": tokens,
        }

    @staticmethod
    def _token_counts(session: Session, names: set[str]) -> dict[str, int]:
        """Active (unrevoked) tokens per team, among ``names``."""
        counts = dict.fromkeys(names, 0)
        rows = session.scalars(
            select(ApiToken.teams).where(ApiToken.revoked_at.is_(None), cast(ApiToken.teams, Text) != "{}")
        )
        for teams in rows:
            for team in teams or {}:
                if team in counts:
                    counts[team] += 1
        return counts

    def _describe(self, session: Session, teams: list[Team]) -> list[dict[str, Any]]:
        names = {t.name for t in teams}
        if not names:
            return []
        entries = dict(
            session.execute(
                select(Entry.team, func.count()).where(Entry.team.in_(sorted(names))).group_by(Entry.team)
            ).all()
        )
        tokens = self._token_counts(session, names)
        return [self._as_dict(t, entries.get(t.name, 0), tokens[t.name]) for t in teams]

    def list_teams(self, access: Access | None = None) -> list[dict[str, Any]]:
        """Every team for an admin; a member's own teams otherwise; by name."""
        stmt = select(Team).order_by(Team.name)
        visible = access.visible_teams if access is not None else None
        if visible is not None:
            stmt = stmt.where(Team.name.in_(sorted(visible)))
        with self.db.session() as session:
            return self._describe(session, list(session.scalars(stmt)))

    def sees_every_team(self, access: Access | None) -> bool:
        """Whether ``access`` sees every entry: an admin (or the system) does; a member does while no
        team it is not in holds an entry."""
        visible = access.visible_teams if access is not None else None
        if visible is None:
            return True
        with self.db.session() as session:
            hidden = session.execute(
                select(Entry.team).where(Entry.team.is_not(None), Entry.team.not_in(sorted(visible))).limit(1)
            ).first()
        return hidden is None

    def check_sees_every_team(self, access: Access | None, what: str) -> None:
        """``Forbidden`` unless ``access`` may read the whole catalog: ``what`` (a bundle plan) covers
        every team's entries, and a caller must not see another team's entries (``docs/security.md``:
        they answer as missing ones)."""
        if not self.sees_every_team(access):
            raise Forbidden(
                f"{what} covers the whole catalog, and it holds entries of teams you are not a member of: "
                "this needs an admin"
            )

    def names(self) -> list[str]:
        """Every team's name (the choices offered to admins)."""
        with self.db.session() as session:
            return list(session.scalars(select(Team.name).order_by(Team.name)))

    def get(self, name: str, access: Access | None = None) -> dict[str, Any]:
        """One team; ``NotFound`` when there is none or ``access`` is not a member (nor an admin)."""
        if access is not None and not access.sees(name):
            raise NotFound(f"team {name!r} does not exist")
        with self.db.session() as session:
            team = session.get(Team, name)
            if team is None:
                raise NotFound(f"team {name!r} does not exist")
            return self._describe(session, [team])[0]

    def create(
        self, name: str, title: str | None = None, *, actor: Actor | str, access: Access | None = None
    ) -> dict[str, Any]:
        check_admin(access, "creating a team")
        check_team_name(name)
        title = _check_title(title)
        who = actor if isinstance(actor, str) else actor.name
        with self.db.session() as session:
            if session.get(Team, name) is not None:
                raise Conflict(f"team {name!r} already exists")
            team = Team(name=name, title=title, created_by=who[:128])
            session.add(team)
            session.flush()
            append_event(session, kind="team", name=name, action="created", actor=actor, team=name, note=title)
            return self._as_dict(team, 0, 0)

    def update(
        self, name: str, title: str | None, *, actor: Actor | str, access: Access | None = None
    ) -> dict[str, Any]:
        """Change a team's title (its name is its identity: entries and tokens refer to it)."""
        if access is not None and not access.sees(name):
            raise NotFound(f"team {name!r} does not exist")
        check_admin(access, "changing a team")
        title = _check_title(title)
        with self.db.session() as session:
            team = session.scalar(select(Team).where(Team.name == name).with_for_update())
            if team is None:
                raise NotFound(f"team {name!r} does not exist")
            if team.title != title:
                team.title = title
                append_event(
                    session, kind="team", name=name, action="updated", actor=actor, team=name, note=f"title: {title}"
                )
            return self._describe(session, [team])[0]

    def delete(self, name: str, *, actor: Actor | str, access: Access | None = None) -> dict[str, Any]:
        """Delete an empty team (``Conflict`` while entries belong to it) and every token's
        membership of it. Returns the team as it was."""
        if access is not None and not access.sees(name):
            raise NotFound(f"team {name!r} does not exist")
        check_admin(access, "deleting a team")
        with self.db.session() as session:
            # Locked: a create or move into this team (which share-locks it) waits for us, then
            # finds no team; one that got there first makes the count below see its entry.
            team = session.scalar(select(Team).where(Team.name == name).with_for_update())
            if team is None:
                raise NotFound(f"team {name!r} does not exist")
            owned = session.scalar(select(func.count()).select_from(Entry).where(Entry.team == name)) or 0
            if owned:
                raise Conflict(
                    f"team {name!r} still owns {owned} entr{'y' if owned == 1 else 'ies'} (archived ones count): "
                    "move them to another team (or make them global) first"
                )
            info = self._describe(session, [team])[0]
            members = session.scalars(
                select(ApiToken).where(cast(ApiToken.teams, Text).contains(f'"{name}"', autoescape=True))
            )
            removed = 0
            for token in members:
                if name in (token.teams or {}):
                    token.teams = {t: r for t, r in token.teams.items() if t != name}
                    removed += 1
            session.delete(team)
            append_event(
                session,
                kind="team",
                name=name,
                action="deleted",
                actor=actor,
                team=name,
                note=f"{removed} token membership{'s' if removed != 1 else ''} removed",
            )
            return info
