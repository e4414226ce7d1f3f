"""``/ui/usage`` (viewer): which entries, versions and agents are used most; and each entry's
``/ui/{collection}/{name}/usage``: who still uses which version (before you retire one).

The same queries as ``GET /api/v1/usage`` and ``GET /api/v1/{collection}/{name}/usage``
(``registry.catalog.usage_report``), for the entries the signed-in user can see.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from starlette.responses import Response

from registry.api.deps import CatalogDep, SettingsDep, UsageDep
from registry.catalog.specs import NAME_PATTERN
from registry.catalog.usage_report import MAX_DAYS, UsageFilter
from registry.ui.auth import Viewer
from registry.ui.collections import COLLECTION_OF_KIND, PREFIX, CollectionDep
from registry.ui.views import ViewDep

#: The windows the overview offers, and how long each is.
WINDOWS: dict[str, tuple[str, timedelta]] = {
    "24h": ("Last 24 hours", timedelta(hours=24)),
    "7d": ("Last 7 days", timedelta(days=7)),
    "30d": ("Last 30 days", timedelta(days=30)),
}
#: Rows in each "top" table of the overview.
TOP = 20
#: The per-entry page's choices of "recent" (days).
DAY_CHOICES = (1, 7, 30, 90, 365)

EntryName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=128)]


router = APIRouter()


@router.get("/usage")
def overview(
    ui: Viewer,
    pages: ViewDep,
    usage: UsageDep,
    settings: SettingsDep,
    window: Literal["24h", "7d", "30d"] = "24h",
) -> Response:
    now = datetime.now(UTC)
    filters = UsageFilter(since=now - WINDOWS[window][1], until=now)

    def top(group: Literal["entry", "version", "agent"]) -> dict[str, Any]:
        return usage.report(ui.principal, filters, group=group, limit=TOP, now=now)

    context = {
        "title": "Usage",
        "nav": "usage",
        "window": window,
        "windows": {key: title for key, (title, _span) in WINDOWS.items()},
        "entries": top("entry"),
        "versions": top("version"),
        "agents": top("agent"),
        "collection_of": COLLECTION_OF_KIND,
        "enabled": settings.usage_enabled,
        "flush_s": settings.usage_flush_s,
    }
    return pages.render("usage.html", context)


@router.get(PREFIX + "/{name}/usage")
def entry_page(
    ui: Viewer,
    pages: ViewDep,
    collection: CollectionDep,
    catalog: CatalogDep,
    usage: UsageDep,
    settings: SettingsDep,
    name: EntryName,
    days: Annotated[int, Query(ge=1, le=MAX_DAYS)] = 30,
) -> Response:
    kind, title = collection.kind, collection.title
    # First: an entry this user cannot see is "not found" before anything else is read.
    report = usage.entry(ui.principal, kind, name, days=days)
    view = catalog.get(kind, name, access=ui.principal)
    context = {
        **collection.common,
        "title": f"Usage of {title.lower()} {name}",
        "entry": view.as_dict(),
        "tab": "usage",
        "report": report,
        "days": days,
        "day_choices": sorted({*DAY_CHOICES, days}),
        "enabled": settings.usage_enabled,
    }
    return pages.render("usage_entry.html", context)
