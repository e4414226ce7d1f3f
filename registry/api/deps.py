"""Dependencies for every route, in the admin API and the web UI alike: the registry's services as
``Annotated[..., Depends(...)]`` types.

One home, so a route states what it needs in its signature (``catalog: CatalogDep``) instead of
fishing it out of the app, and a test or a new front end can swap a service in one place.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Annotated, Any

from fastapi import Depends, Request

from registry.catalog.protection import ProtectionPolicy
from registry.catalog.reports import AuditService, UsageService
from registry.catalog.reviews import ChangeRequestService
from registry.catalog.service import CatalogService
from registry.catalog.teams import TeamService
from registry.catalog.uploads import UploadStore
from registry.catalog.watchers import EntryWatchers
from registry.catalog.web_sessions import UiSessionStore
from registry.config import Settings
from registry.events.service import EventSubscriptionService
from registry.limits import Limits
from registry.runtime import Registry, registry_of
from registry.tokens import TokenService


def get_registry(request: Request) -> Registry:
    """The registry of the app serving ``request``, for code handed a request rather than a dependency."""
    return registry_of(request.app)


def _part(path: str) -> Any:
    """A dependency giving the registry's part at ``path`` (``"settings.limits"``). Async, so FastAPI calls it
    on the event loop instead of handing a one-line getter to its thread pool."""
    read = attrgetter(path)

    async def provide(request: Request) -> Any:
        return read(registry_of(request.app))

    return Depends(provide)


async def _registry(request: Request) -> Registry:
    return registry_of(request.app)


RegistryDep = Annotated[Registry, Depends(_registry)]
SettingsDep = Annotated[Settings, _part("settings")]
LimitsDep = Annotated[Limits, _part("settings.limits")]
CatalogDep = Annotated[CatalogService, _part("catalog")]
ReviewsDep = Annotated[ChangeRequestService, _part("reviews")]
ProtectionDep = Annotated[ProtectionPolicy, _part("protection")]
TokensDep = Annotated[TokenService, _part("tokens")]
TeamsDep = Annotated[TeamService, _part("teams")]
AuditDep = Annotated[AuditService, _part("audit")]
UsageDep = Annotated[UsageService, _part("usage")]
WatchersDep = Annotated[EntryWatchers, _part("watchers")]
WebSessionsDep = Annotated[UiSessionStore, _part("web_sessions")]
UploadsDep = Annotated[UploadStore, _part("uploads")]
EventsDep = Annotated[EventSubscriptionService, _part("events")]
