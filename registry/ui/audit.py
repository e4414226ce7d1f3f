"""``/ui/audit``: the audit trail (every change and governance event, newest first, filtered), and
for admins a check of its hash chain.

What a person sees follows the catalog's visibility (``registry.catalog.audit_log``): their teams'
rows and everyone's, all of them for an admin. Verifying walks the whole chain, every team's rows,
so it is an admin's (a POST with the CSRF token; its answer is this page with the result on it).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from registry.api.deps import AuditDep
from registry.catalog.audit_log import AUDIT_KINDS, AuditFilter
from registry.catalog.reports import AuditService
from registry.catalog.web_sessions import SignedIn
from registry.ui.auth import AdminForm, Viewer
from registry.ui.collections import COLLECTION_OF_KIND
from registry.ui.views import View, ViewDep

#: Rows per page.
AUDIT_PAGE = 50


router = APIRouter(prefix="/audit")


def audit_view(
    pages: View,
    audit: AuditService,
    ui: SignedIn,
    filters: dict[str, Any],
    after: int | None,
    verification: dict[str, Any] | None = None,
) -> Response:
    where = AuditFilter(
        actor=filters["actor"] or None,
        team=filters["team"] or None,
        kind=filters["kind"] or None,
        name=filters["name"] or None,
        action=filters["action"] or None,
        override=True if filters["override"] else None,
    )
    found = audit.page(where, access=ui.principal, after=after, limit=AUDIT_PAGE)
    rows = [
        {**row, "collection": COLLECTION_OF_KIND.get(row["kind"]), "short_hash": row["hash"][:12]}
        for row in found.items
    ]
    context = {
        "title": "Audit trail",
        "nav": "audit",
        "rows": rows,
        "filters": filters,
        "kinds": AUDIT_KINDS,
        "next_after": found.next_after,
        "paged": after is not None,
        "verification": verification,
    }
    return pages.render("audit.html", context)


@router.get("")
def audit_trail(
    ui: Viewer,
    pages: ViewDep,
    audit: AuditDep,
    actor: Annotated[str, Query(max_length=128)] = "",
    team: Annotated[str, Query(max_length=64)] = "",
    kind: Annotated[str, Query(max_length=16)] = "",
    name: Annotated[str, Query(max_length=128)] = "",
    action: Annotated[str, Query(max_length=32)] = "",
    override: Annotated[str, Query(max_length=8)] = "",
    after: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
) -> Response:
    filters = {
        "actor": actor.strip(),
        "team": team.strip(),
        "kind": kind.strip(),
        "name": name.strip(),
        "action": action.strip(),
        "override": "1" if override else "",
    }
    return audit_view(pages, audit, ui, filters, after)


@router.post("/verify")
async def verify(form: AdminForm, pages: ViewDep, audit: AuditDep) -> Response:
    ui, _fields = form
    report = await run_in_threadpool(audit.verify)
    verification = {**report.as_dict(), "summary": report.summary()}
    empty = {key: "" for key in ("actor", "team", "kind", "name", "action", "override")}
    return await run_in_threadpool(audit_view, pages, audit, ui, empty, None, verification)
