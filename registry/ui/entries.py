"""``/ui/{prompts,resources,tools}``: lists, an entry's page, its history and diffs, and the
writes that need no editor: moving a label (promote, roll back), archiving and restoring, and
restoring an old version as the newest ("Restore v6 as a new version").

Thin like the REST routers: the catalog service reads, checks and writes; these functions pick
the page and its values. Every write is a POST with the session's CSRF token, behind a
confirmation page (reachable with JavaScript off), and answers with a redirect to the entry
(post/redirect/get) carrying a one-time notice.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from registry.catalog.browse import DEFAULT_SORT, SORTS, USAGE_DAYS, check_prefix, check_sort, folder_path
from registry.catalog.errors import Forbidden, Invalid
from registry.catalog.preconditions import make_etag
from registry.catalog.service import CatalogService
from registry.catalog.specs import NAME_PATTERN, TAG_PATTERN, is_label
from registry.catalog.teams import GLOBAL_ONLY, is_team_name
from registry.limits import LimitExceeded
from registry.ui.auth import Editor, EditorForm, Viewer, is_https
from registry.ui.diffview import diff_specs
from registry.ui.paging import page_window
from registry.ui.teams import team_choices, visible_teams
from registry.ui.templating import Pages, set_flash

#: Entries per list page.
PAGE_SIZE = 50
#: Labels offered when promoting, besides those the entry already has.
COMMON_LABELS = ("production", "staging")
INT32_MAX = 2**31 - 1
#: Longest reason a team move may give (as in the admin API).
REASON_CHARS = 2000

EntryName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=128)]
VersionQuery = Annotated[int | None, Query(ge=1, le=INT32_MAX)]
VersionNumber = Annotated[int, Path(ge=1, le=INT32_MAX)]


def _catalog(request: Request) -> CatalogService:
    catalog: CatalogService = request.app.state.registry.catalog
    return catalog


def _field(form: Any, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def _version_field(form: Any, name: str = "version") -> int:
    raw = _field(form, name)
    if not raw.isdigit() or not 1 <= int(raw) <= INT32_MAX:
        raise Invalid(f"the version must be a whole number from 1 (got {raw!r})")
    return int(raw)


def entry_router(pages: Pages, collection: str, kind: str, title: str) -> APIRouter:
    routes = APIRouter(prefix=f"/{collection}")
    base = f"/ui/{collection}"
    common = {"collection": collection, "kind": kind, "kind_title": title, "nav": collection}

    def entry_url(name: str) -> str:
        return f"{base}/{name}"

    def redirect_with_notice(request: Request, target: str, notice: str) -> Response:
        response = RedirectResponse(target, status_code=303)
        set_flash(response, notice, secure=is_https(request))
        return response

    @routes.get("")
    def list_entries(
        request: Request,
        ui: Viewer,
        q: Annotated[str | None, Query(max_length=4096)] = None,
        tag: Annotated[str | None, Query(max_length=256)] = None,
        archived: Annotated[str | None, Query(max_length=8)] = None,
        page: Annotated[int, Query(ge=1, le=INT32_MAX)] = 1,
        team: Annotated[str | None, Query(max_length=64)] = None,
        sort: Annotated[str | None, Query(max_length=256)] = None,
        prefix: Annotated[str | None, Query(max_length=256)] = None,
        folders: Annotated[str | None, Query(max_length=8)] = None,
    ) -> Response:
        catalog = _catalog(request)
        q = (q or "").strip() or None
        tag = (tag or "").strip() or None
        team = (team or "").strip() or None
        sort = (sort or "").strip() or DEFAULT_SORT
        prefix = (prefix or "").strip() or None
        show_archived = archived not in (None, "", "0")
        grouped = folders not in (None, "", "0")
        filters = {
            "q": q or "",
            "tag": tag or "",
            "archived": "1" if show_archived else "",
            "team": team or "",
            "sort": "" if sort == DEFAULT_SORT else sort,
            "prefix": prefix or "",
            "folders": "1" if grouped else "",
        }
        error = None
        if q is not None and len(q) > catalog.limits.search_chars:
            error = str(
                LimitExceeded(
                    "search_chars",
                    f"the search has {len(q)} characters; at most {catalog.limits.search_chars} are searched",
                )
            )
        elif tag is not None and not _matches(TAG_PATTERN, tag):
            error = f"{tag!r} is not a tag: tags are 1-64 of A-Z a-z 0-9 _ . : -"
        elif team is not None and team != GLOBAL_ONLY and not is_team_name(team):
            error = f"{team!r} is not a team name: 1-64 of a-z 0-9 _ . -, starting with a letter or digit"
        else:
            error = check_sort(sort) or (check_prefix(prefix) if prefix is not None else None)
        if error is not None:
            filters["sort"] = "" if check_sort(sort) else filters["sort"]
        items: list[dict[str, Any]] = []
        folder_rows: list[tuple[str, int]] = []
        folders_total = 0
        total, exact = 0, True
        if error is None:
            if grouped and page == 1:
                folder_rows, folders_total = catalog.folders(
                    kind, prefix=prefix or "", q=q, tag=tag, archived=show_archived, team=team, access=ui.principal
                )
            result = catalog.list_entries(
                kind,
                q=q,
                tag=tag,
                archived=show_archived,
                limit=PAGE_SIZE,
                offset=(page - 1) * PAGE_SIZE,
                team=team,
                access=ui.principal,
                sort=sort,
                prefix=prefix,
                direct=grouped,
            )
            items, total = result.items, result.total
            exact = getattr(result, "total_exact", True)
        pages_total = max(1, -(-total // PAGE_SIZE))
        context = {
            **common,
            "title": title + "s",
            "items": items,
            "total": total,
            "total_exact": exact,
            "page": page,
            "pages_total": pages_total,
            "page_links": page_window(page, pages_total, known_last=exact),
            "filters": filters,
            "sort": sort if not check_sort(sort) else DEFAULT_SORT,
            "sorts": SORTS,
            "usage_days": USAGE_DAYS,
            "grouped": grouped,
            "folders": folder_rows,
            "folders_total": folders_total,
            "crumbs": folder_path(prefix) if prefix and not check_prefix(prefix) else [],
            "error": error,
            "teams": visible_teams(request, ui),
            "global_only": GLOBAL_ONLY,
        }
        return pages.render(request, "list.html", context, status=400 if error else 200, partial="_list_results.html")

    @routes.get("/{name}")
    def entry(request: Request, ui: Viewer, name: EntryName, version: VersionQuery = None) -> Response:
        view = _catalog(request).get(kind, name, version=version, access=ui.principal)
        context = {
            **common,
            "title": f"{title} {name}" + (f" v{view.version}" if version is not None else ""),
            "entry": view.as_dict(),
            # This version's own time (the entry's updated_at is its newest change's).
            "saved_at": (view.saved_at or view.updated_at).isoformat(),
            "viewing_old": view.version != view.latest_version,
            "label_choices": _label_choices(view.labels),
            "tab": "entry",
            # Open change requests to move its protected labels (registry/ui/reviews.py shows each).
            "change_requests": request.app.state.registry.reviews.for_entry(kind, name, access=ui.principal),
        }
        return pages.render(request, "entry.html", context)

    @routes.get("/{name}/history")
    def history(request: Request, ui: Viewer, name: EntryName) -> Response:
        catalog = _catalog(request)
        view = catalog.get(kind, name, access=ui.principal)
        versions = catalog.versions(kind, name, access=ui.principal)
        context = {
            **common,
            "title": f"History of {title.lower()} {name}",
            "entry": view.as_dict(),
            "versions": versions,
            "production": view.labels.get("production"),
            "tab": "history",
        }
        return pages.render(request, "history.html", context)

    @routes.get("/{name}/diff")
    def diff(
        request: Request,
        ui: Viewer,
        name: EntryName,
        from_: Annotated[int | None, Query(alias="from", ge=1, le=INT32_MAX)] = None,
        to: VersionQuery = None,
    ) -> Response:
        catalog = _catalog(request)
        newest = catalog.get(kind, name, access=ui.principal)
        to_version = to or newest.latest_version
        from_version = from_ if from_ is not None else max(1, to_version - 1)
        old = catalog.get(kind, name, version=from_version, access=ui.principal)
        new = catalog.get(kind, name, version=to_version, access=ui.principal)
        changed, same = diff_specs(old.spec, new.spec)
        context = {
            **common,
            "title": f"{title} {name}: v{from_version} → v{to_version}",
            "entry": newest.as_dict(),
            "from_version": from_version,
            "to_version": to_version,
            "changed": changed,
            "same": same,
            "tab": "diff",
        }
        return pages.render(request, "diff.html", context)

    # ------------------------------------------------------------------ writes (editor scope)
    @routes.get("/{name}/promote")
    def promote_confirm(
        request: Request,
        ui: Editor,
        name: EntryName,
        version: VersionQuery = None,
        label: Annotated[str | None, Query(max_length=64)] = None,
    ) -> Response:
        view = _catalog(request).get(kind, name, access=ui.principal)
        label = (label or "production").strip()
        if not is_label(label):
            raise Invalid(f"{label!r} is not a label name: 1-64 of a-z 0-9 _ . -, starting with a letter or digit")
        target = version or view.latest_version
        _catalog(request).get(kind, name, version=target, access=ui.principal)  # 404 page: no such version
        current = view.labels.get(label)
        context = {
            **common,
            "title": f"Point {label} at v{target}?",
            "entry": view.as_dict(),
            "label": label,
            "version": target,
            "current": current,
            "rollback": current is not None and target < current,
            # A protected label moves by review (a change request), not by this form.
            "protected": request.app.state.registry.protection.protected(label),
        }
        return pages.render(request, "confirm_label.html", context)

    @routes.post("/{name}/promote")
    async def promote(request: Request, form: EditorForm, name: EntryName) -> Response:
        ui, fields = form
        label = _field(fields, "label")
        version = _version_field(fields)
        result = await run_in_threadpool(_catalog(request).set_label, kind, name, label, version, ui.principal.writes())
        notice = (
            f"{label} now serves v{version} of {name}." if result.changed else f"{label} already served v{version}."
        )
        return redirect_with_notice(request, entry_url(name), notice)

    @routes.get("/{name}/versions/{number}/restore")
    def restore_version_confirm(request: Request, ui: Editor, name: EntryName, number: VersionNumber) -> Response:
        catalog = _catalog(request)
        old = catalog.get(kind, name, version=number, access=ui.principal)
        newest = catalog.get(kind, name, access=ui.principal)
        # Refused here, not only by the post: a confirmation the person can never act on is a dead end.
        if not ui.may_edit(newest.team):
            where = f"team {newest.team!r}" if newest.team else "global entries"
            raise Forbidden(f"{kind} {name!r}: restoring a version needs the editor role on {where}")
        changed, _same = diff_specs(newest.spec, old.spec)
        context = {
            **common,
            "title": f"Restore v{number} of {name} as a new version?",
            "entry": newest.as_dict(),
            "number": number,
            "changed": [f.name for f in changed],
            "note": f"Restore v{number}",
            "note_chars": catalog.limits.change_note_chars,
        }
        return pages.render(request, "confirm_restore_version.html", context)

    @routes.post("/{name}/versions/{number}/restore")
    async def restore_version(request: Request, form: EditorForm, name: EntryName, number: VersionNumber) -> Response:
        ui, fields = form
        base = _version_field(fields, "base_version")  # the newest the confirmation showed: a save since is a 412
        note = _field(fields, "change_note") or f"Restore v{number}"
        result = await run_in_threadpool(
            _catalog(request).restore_version,
            kind,
            name,
            number,
            ui.principal.writes(if_match=make_etag(base), note=note),
        )
        view = result.view
        if not result.changed:
            notice = f"Nothing to restore: the newest version, v{view.version}, already says what v{number} says."
        else:
            serving = ", ".join(
                f"{label} still serves v{v}" for label, v in sorted(view.labels.items()) if label != "latest"
            )
            publish = f" {serving}: point a label at v{view.version} to publish it." if serving else ""
            notice = f"Restored v{number} of {name} as v{view.version}.{publish}"
        return redirect_with_notice(request, f"{entry_url(name)}?version={view.version}", notice)

    @routes.get("/{name}/archive")
    def archive_confirm(request: Request, ui: Editor, name: EntryName) -> Response:
        view = _catalog(request).get(kind, name, access=ui.principal)
        context = {**common, "title": f"Archive {name}?", "entry": view.as_dict(), "action": "archive"}
        return pages.render(request, "confirm_archive.html", context)

    @routes.get("/{name}/restore")
    def restore_confirm(request: Request, ui: Editor, name: EntryName) -> Response:
        view = _catalog(request).get(kind, name, access=ui.principal)
        context = {**common, "title": f"Restore {name}?", "entry": view.as_dict(), "action": "restore"}
        return pages.render(request, "confirm_archive.html", context)

    @routes.post("/{name}/archive")
    async def archive(request: Request, form: EditorForm, name: EntryName) -> Response:
        ui, _fields = form
        await run_in_threadpool(_catalog(request).set_archived, kind, name, True, ui.principal.writes())
        return redirect_with_notice(request, entry_url(name), f"{name} is archived: agents no longer see it.")

    @routes.post("/{name}/restore")
    async def restore(request: Request, form: EditorForm, name: EntryName) -> Response:
        ui, _fields = form
        await run_in_threadpool(_catalog(request).set_archived, kind, name, False, ui.principal.writes())
        return redirect_with_notice(request, entry_url(name), f"{name} is restored: agents see it again.")

    @routes.get("/{name}/team")
    def team_confirm(
        request: Request,
        ui: Editor,
        name: EntryName,
        team: Annotated[str | None, Query(max_length=64)] = None,
    ) -> Response:
        view = _catalog(request).get(kind, name, access=ui.principal)
        if not ui.may_edit(view.team):
            where = f"team {view.team!r}" if view.team else "global entries"
            raise Forbidden(f"{kind} {name!r}: moving it needs the editor role on {where}")
        choices = [c for c in team_choices(request, ui) if c != view.team]
        context = {
            **common,
            "title": f"Move {name} to another team?",
            "entry": view.as_dict(),
            "choices": choices,
            "chosen": (team or "").strip(),
        }
        return pages.render(request, "confirm_team.html", context)

    @routes.post("/{name}/team")
    async def move_team(request: Request, form: EditorForm, name: EntryName) -> Response:
        ui, fields = form
        team = _field(fields, "team") or None
        reason = _field(fields, "reason") or None
        if reason is not None and len(reason) > REASON_CHARS:
            raise Invalid(f"the reason has {len(reason)} characters; at most {REASON_CHARS}")
        result = await run_in_threadpool(_catalog(request).set_team, kind, name, team, ui.principal.writes(reason))
        where = f"team {team}" if team else "global (everyone sees it)"
        notice = f"{name} now belongs to {where}." if result.changed else f"{name} already belonged to {where}."
        return redirect_with_notice(request, entry_url(name), notice)

    return routes


def _label_choices(labels: dict[str, int]) -> list[str]:
    return sorted(set(COMMON_LABELS) | {name for name in labels if name != "latest"})


def _matches(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern.removeprefix("^").removesuffix("$"), value) is not None
