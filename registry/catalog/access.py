"""Who may see and change what: the service layer's view of a caller.

``registry.tokens.Principal`` satisfies ``Access`` (the catalog layer does not import it: tokens
sit above the catalog). Writes and reads take an ``access``; None means the system itself (the
seed import, the CLI, migrations), which may do everything.

Entries belong to a team or are global (team None). Everyone sees global entries; a team's
entries are seen by its members and by admins. Roles, weakest first: viewer, editor, reviewer,
admin (see ``registry.tokens.TEAM_ROLES``).
"""

from __future__ import annotations

from typing import Protocol

from registry.catalog.errors import Forbidden, NotFound, Subject


class Access(Protocol):
    def sees(self, team: str | None) -> bool: ...

    def may(self, role: str, team: str | None) -> bool: ...

    @property
    def visible_teams(self) -> frozenset[str] | None:
        """Teams whose entries are visible besides global ones; None: all teams."""
        ...


def check_sees(access: Access | None, team: str | None, what: str, *, about: Subject | None = None) -> None:
    """NotFound (as if it did not exist: its name is not disclosed either) when hidden; ``about``:
    what the refusal names (as a missing one's would, so the two still answer alike)."""
    if access is not None and not access.sees(team):
        raise NotFound(f"{what} does not exist", about=about)


def check_may(access: Access | None, role: str, team: str | None, what: str, *, about: Subject | None = None) -> None:
    """NotFound when ``access`` cannot see it (``about`` as for ``check_sees``); Forbidden when it
    sees it without ``role``."""
    check_sees(access, team, what, about=about)
    if access is not None and not access.may(role, team):
        where = f"team {team!r}" if team is not None else "global entries"
        raise Forbidden(f"{what}: this needs the {role} role on {where}")
