"""``/ui/agents`` (viewer): the MCP sessions open right now on every replica.

The same service call as ``GET /api/v1/agents`` (``registry.catalog.agents``); the home page shows
the count and the newest few (``HOME_AGENTS``).
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from registry.api.deps import UsageDep
from registry.catalog.agents import MAX_AGENTS, TRANSPORT_TITLES
from registry.ui.auth import Viewer
from registry.ui.views import ViewDep

#: Sessions on the home page.
HOME_AGENTS = 5


router = APIRouter()


@router.get("/agents")
def agents(ui: Viewer, pages: ViewDep, usage: UsageDep) -> Response:
    found = usage.agents(limit=MAX_AGENTS)
    context = {
        "title": "Connected agents",
        "nav": "agents",
        "agents": found,
        "transports": TRANSPORT_TITLES,
        "idle_minutes": round(found.idle_timeout_s / 60),
    }
    return pages.render("agents.html", context)
