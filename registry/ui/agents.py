"""``/ui/agents`` (viewer): the MCP sessions open right now on every replica.

The same service call as ``GET /api/v1/agents`` (``registry.catalog.agents``); the home page shows
the count and the newest few (``home_agents``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from registry.catalog.agents import MAX_AGENTS, TRANSPORT_TITLES, ConnectedAgents, connected_agents
from registry.runtime import Registry
from registry.ui.auth import Viewer
from registry.ui.templating import Pages

#: Sessions on the home page.
HOME_AGENTS = 5


def _registry(request: Request) -> Registry:
    registry: Registry = request.app.state.registry
    return registry


def home_agents(request: Request) -> ConnectedAgents:
    """The newest few connected agents and how many there are, for the home page."""
    registry = _registry(request)
    return connected_agents(
        registry.db, idle_timeout_s=registry.settings.session_idle_timeout_s, limit=HOME_AGENTS, newest_first=True
    )


def router(pages: Pages) -> APIRouter:
    routes = APIRouter()

    @routes.get("/agents")
    def agents(request: Request, ui: Viewer) -> Response:
        registry = _registry(request)
        found = connected_agents(registry.db, idle_timeout_s=registry.settings.session_idle_timeout_s, limit=MAX_AGENTS)
        context = {
            "title": "Connected agents",
            "nav": "agents",
            "agents": found,
            "transports": TRANSPORT_TITLES,
            "idle_minutes": round(found.idle_timeout_s / 60),
        }
        return pages.render(request, "agents.html", context)

    return routes
