"""Dependencies for every route, in the admin API and the web UI alike: the registry's services as
``Annotated[..., Depends(...)]`` types.

One home, so a route states what it needs in its signature (``catalog: CatalogDep``) instead of
fishing it out of the app, and a test or a new front end can swap a service in one place.
"""

from __future__ import annotations

from typing import Annotated

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
from registry.limits import Limits
from registry.runtime import Registry, registry_of
from registry.tokens import TokenService


def get_registry(request: Request) -> Registry:
    return registry_of(request.app)


RegistryDep = Annotated[Registry, Depends(get_registry)]


def get_settings(registry: RegistryDep) -> Settings:
    return registry.settings


def get_limits(registry: RegistryDep) -> Limits:
    return registry.settings.limits


def get_catalog(registry: RegistryDep) -> CatalogService:
    return registry.catalog


def get_reviews(registry: RegistryDep) -> ChangeRequestService:
    return registry.reviews


def get_protection(registry: RegistryDep) -> ProtectionPolicy:
    return registry.protection


def get_tokens(registry: RegistryDep) -> TokenService:
    return registry.tokens


def get_teams(registry: RegistryDep) -> TeamService:
    return registry.teams


def get_audit(registry: RegistryDep) -> AuditService:
    return registry.audit


def get_usage(registry: RegistryDep) -> UsageService:
    return registry.usage


def get_watchers(registry: RegistryDep) -> EntryWatchers:
    return registry.watchers


def get_web_sessions(registry: RegistryDep) -> UiSessionStore:
    return registry.web_sessions


def get_uploads(registry: RegistryDep) -> UploadStore:
    return registry.uploads


SettingsDep = Annotated[Settings, Depends(get_settings)]
LimitsDep = Annotated[Limits, Depends(get_limits)]
WebSessionsDep = Annotated[UiSessionStore, Depends(get_web_sessions)]
UploadsDep = Annotated[UploadStore, Depends(get_uploads)]
CatalogDep = Annotated[CatalogService, Depends(get_catalog)]
ReviewsDep = Annotated[ChangeRequestService, Depends(get_reviews)]
ProtectionDep = Annotated[ProtectionPolicy, Depends(get_protection)]
TokensDep = Annotated[TokenService, Depends(get_tokens)]
TeamsDep = Annotated[TeamService, Depends(get_teams)]
WatchersDep = Annotated[EntryWatchers, Depends(get_watchers)]
AuditDep = Annotated[AuditService, Depends(get_audit)]
UsageDep = Annotated[UsageService, Depends(get_usage)]
