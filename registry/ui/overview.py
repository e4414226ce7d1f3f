"""``/ui/`` (home: counts, the newest changes, the newest connected agents, where agents connect)
and ``/ui/activity`` (the change log, newest first, filtered by kind, entry and author, each row
linking to its diff)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from starlette.responses import Response

from registry.api.deps import CatalogDep, UsageDep
from registry.catalog.activity import ChangeFilter, recent_changes
from registry.catalog.agents import TRANSPORT_TITLES
from registry.catalog.specs import KIND_BY_COLLECTION
from registry.ui.agents import HOME_AGENTS
from registry.ui.auth import Viewer
from registry.ui.collections import COLLECTION_OF_KIND
from registry.ui.templating import COLLECTIONS
from registry.ui.views import ViewDep

#: Changes on the home page, and per activity page.
HOME_CHANGES = 10
ACTIVITY_PAGE = 50
#: A label move's note: "production: 3 -> 2" (the old version may be "-": the label was new).
_LABEL_NOTE = re.compile(r"^[a-z0-9][a-z0-9_.\-]*: (\d+|-) -> (\d+)$")


def change_link(change: dict[str, Any]) -> tuple[str, str] | None:
    """(where a change row links, what the link says): its diff when there is one to show."""
    collection = COLLECTION_OF_KIND.get(change["kind"])
    if collection is None:
        return None
    base = f"/ui/{collection}/{change['name']}"
    version = change.get("version")
    action = change["action"]
    if action == "updated" and isinstance(version, int) and version > 1:
        return f"{base}/diff?from={version - 1}&to={version}", f"diff v{version - 1} → v{version}"
    if action == "label_moved" and isinstance(version, int):
        match = _LABEL_NOTE.match(change.get("note") or "")
        if match and match.group(1) != "-" and int(match.group(1)) != version:
            old = int(match.group(1))
            return f"{base}/diff?from={old}&to={version}", f"diff v{old} → v{version}"
    if isinstance(version, int):
        return f"{base}?version={version}", f"v{version}"
    return base, "entry"


def _with_links(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for change in changes:
        link = change_link(change)
        collection = COLLECTION_OF_KIND.get(change["kind"], "")
        rows.append({**change, "link": link, "entry_url": f"/ui/{collection}/{change['name']}"})
    return rows


router = APIRouter()


@router.get("/")
def home(ui: Viewer, pages: ViewDep, catalog: CatalogDep, usage: UsageDep) -> Response:
    counts = []
    for collection, title in COLLECTIONS:
        kind = KIND_BY_COLLECTION[collection]
        active = catalog.list_entries(kind, limit=1, access=ui.principal).total
        archived = catalog.list_entries(kind, archived=True, limit=1, access=ui.principal).total
        counts.append({"collection": collection, "title": title, "active": active, "archived": archived})
    changes = recent_changes(catalog, limit=HOME_CHANGES, access=ui.principal).items
    base = f"{pages.request.url.scheme}://{pages.request.url.netloc}"
    context = {
        "title": "Home",
        "nav": "home",
        "counts": counts,
        "changes": _with_links(changes),
        "mcp_url": base + "/mcp",
        "agents": usage.agents(limit=HOME_AGENTS, newest_first=True),
        "transports": TRANSPORT_TITLES,
    }
    return pages.render("home.html", context)


@router.get("/activity")
def activity(
    ui: Viewer,
    pages: ViewDep,
    catalog: CatalogDep,
    kind: Annotated[Literal["", "prompt", "resource", "tool"], Query()] = "",
    name: Annotated[str, Query(max_length=128)] = "",
    author: Annotated[str, Query(max_length=128)] = "",
    before: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
) -> Response:
    where = ChangeFilter(kind=kind or None, name=name.strip() or None, actor=author.strip() or None)
    page = recent_changes(catalog, where, before=before, limit=ACTIVITY_PAGE, access=ui.principal)
    context = {
        "title": "Activity",
        "nav": "activity",
        "changes": _with_links(page.items),
        "filters": {"kind": kind, "name": name.strip(), "author": author.strip()},
        "next_before": page.next_before,
        "paged": before is not None,
    }
    return pages.render("activity.html", context, partial="_activity_results.html")
