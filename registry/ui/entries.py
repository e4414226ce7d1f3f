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
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from registry.api.deps import CatalogDep, ProtectionDep, ReviewsDep
from registry.catalog.browse import DEFAULT_SORT, SORTS, USAGE_DAYS, check_prefix, check_sort, folder_path
from registry.catalog.errors import Forbidden, Invalid
from registry.catalog.preconditions import make_etag
from registry.catalog.specs import NAME_PATTERN, TAG_PATTERN, is_label
from registry.catalog.teams import GLOBAL_ONLY, is_team_name
from registry.limits import LimitExceeded
from registry.ui.auth import Editor, EditorForm, Viewer, form_field
from registry.ui.collections import PREFIX, CollectionDep
from registry.ui.diffview import diff_specs
from registry.ui.paging import page_window
from registry.ui.teams import team_choices, visible_teams
from registry.ui.views import View

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


def _version_field(form: Any, name: str = "version") -> int:
    raw = form_field(form, name)
    if not raw.isdigit() or not 1 <= int(raw) <= INT32_MAX:
        raise Invalid(f"the version must be a whole number from 1 (got {raw!r})")
    return int(raw)


@dataclass
class EntryPages(View):
    """The pages of an entry of the route's collection."""

    collection: CollectionDep
    catalog: CatalogDep

    @property
    def kind(self) -> str:
        return self.collection.kind


EntryPagesDep = Annotated[EntryPages, Depends()]
router = APIRouter(prefix=PREFIX)


@router.get("")
def list_entries(
    ui: Viewer,
    pages: EntryPagesDep,
    q: Annotated[str | None, Query(max_length=4096)] = None,
    tag: Annotated[str | None, Query(max_length=256)] = None,
    archived: Annotated[str | None, Query(max_length=8)] = None,
    page: Annotated[int, Query(ge=1, le=INT32_MAX)] = 1,
    team: Annotated[str | None, Query(max_length=64)] = None,
    sort: Annotated[str | None, Query(max_length=256)] = None,
    prefix: Annotated[str | None, Query(max_length=256)] = None,
    folders: Annotated[str | None, Query(max_length=8)] = None,
) -> Response:
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
    if q is not None and len(q) > pages.catalog.limits.search_chars:
        error = str(
            LimitExceeded(
                "search_chars",
                f"the search has {len(q)} characters; at most {pages.catalog.limits.search_chars} are searched",
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
            folder_rows, folders_total = pages.catalog.folders(
                pages.kind,
                prefix=prefix or "",
                q=q,
                tag=tag,
                archived=show_archived,
                team=team,
                access=ui.principal,
            )
        result = pages.catalog.list_entries(
            pages.kind,
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
        **pages.collection.common,
        "title": pages.collection.title + "s",
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
        "teams": visible_teams(pages.request, ui),
        "global_only": GLOBAL_ONLY,
    }
    return pages.render("list.html", context, status=400 if error else 200, partial="_list_results.html")


@router.get("/{name}")
def entry(
    ui: Viewer, pages: EntryPagesDep, reviews: ReviewsDep, name: EntryName, version: VersionQuery = None
) -> Response:
    view = pages.catalog.get(pages.kind, name, version=version, access=ui.principal)
    context = {
        **pages.collection.common,
        "title": f"{pages.collection.title} {name}" + (f" v{view.version}" if version is not None else ""),
        "entry": view.as_dict(),
        # This version's own time (the entry's updated_at is its newest change's).
        "saved_at": (view.saved_at or view.updated_at).isoformat(),
        "viewing_old": view.version != view.latest_version,
        "label_choices": _label_choices(view.labels),
        "tab": "entry",
        # Open change requests to move its protected labels (registry/ui/reviews.py shows each).
        "change_requests": reviews.for_entry(pages.kind, name, access=ui.principal),
    }
    return pages.render("entry.html", context)


@router.get("/{name}/history")
def history(ui: Viewer, pages: EntryPagesDep, name: EntryName) -> Response:
    view = pages.catalog.get(pages.kind, name, access=ui.principal)
    versions = pages.catalog.versions(pages.kind, name, access=ui.principal)
    context = {
        **pages.collection.common,
        "title": f"History of {pages.collection.title.lower()} {name}",
        "entry": view.as_dict(),
        "versions": versions,
        "production": view.labels.get("production"),
        "tab": "history",
    }
    return pages.render("history.html", context)


@router.get("/{name}/diff")
def diff(
    ui: Viewer,
    pages: EntryPagesDep,
    name: EntryName,
    from_: Annotated[int | None, Query(alias="from", ge=1, le=INT32_MAX)] = None,
    to: VersionQuery = None,
) -> Response:
    newest = pages.catalog.get(pages.kind, name, access=ui.principal)
    to_version = to or newest.latest_version
    from_version = from_ if from_ is not None else max(1, to_version - 1)
    old = pages.catalog.get(pages.kind, name, version=from_version, access=ui.principal)
    new = pages.catalog.get(pages.kind, name, version=to_version, access=ui.principal)
    changed, same = diff_specs(old.spec, new.spec)
    context = {
        **pages.collection.common,
        "title": f"{pages.collection.title} {name}: v{from_version} → v{to_version}",
        "entry": newest.as_dict(),
        "from_version": from_version,
        "to_version": to_version,
        "changed": changed,
        "same": same,
        "tab": "diff",
    }
    return pages.render("diff.html", context)


# ------------------------------------------------------------------ writes (editor scope)
@router.get("/{name}/promote")
def promote_confirm(
    ui: Editor,
    pages: EntryPagesDep,
    protection: ProtectionDep,
    name: EntryName,
    version: VersionQuery = None,
    label: Annotated[str | None, Query(max_length=64)] = None,
) -> Response:
    view = pages.catalog.get(pages.kind, name, access=ui.principal)
    label = (label or "production").strip()
    if not is_label(label):
        raise Invalid(f"{label!r} is not a label name: 1-64 of a-z 0-9 _ . -, starting with a letter or digit")
    target = version or view.latest_version
    pages.catalog.get(pages.kind, name, version=target, access=ui.principal)  # 404 page: no such version
    current = view.labels.get(label)
    context = {
        **pages.collection.common,
        "title": f"Point {label} at v{target}?",
        "entry": view.as_dict(),
        "label": label,
        "version": target,
        "current": current,
        "rollback": current is not None and target < current,
        # A protected label moves by review (a change request), not by this form.
        "protected": protection.protected(label),
    }
    return pages.render("confirm_label.html", context)


@router.post("/{name}/promote")
async def promote(form: EditorForm, pages: EntryPagesDep, name: EntryName) -> Response:
    ui, fields = form
    label = form_field(fields, "label")
    version = _version_field(fields)
    result = await run_in_threadpool(
        pages.catalog.set_label,
        pages.kind,
        name,
        label,
        version,
        actor=ui.principal.actor(),
        access=ui.principal,
    )
    notice = f"{label} now serves v{version} of {name}." if result.changed else f"{label} already served v{version}."
    return pages.redirect(pages.collection.url(name), notice)


@router.get("/{name}/versions/{number}/restore")
def restore_version_confirm(ui: Editor, pages: EntryPagesDep, name: EntryName, number: VersionNumber) -> Response:
    old = pages.catalog.get(pages.kind, name, version=number, access=ui.principal)
    newest = pages.catalog.get(pages.kind, name, access=ui.principal)
    # Refused here, not only by the post: a confirmation the person can never act on is a dead end.
    if not ui.may_edit(newest.team):
        where = f"team {newest.team!r}" if newest.team else "global entries"
        raise Forbidden(f"{pages.kind} {name!r}: restoring a version needs the editor role on {where}")
    changed, _same = diff_specs(newest.spec, old.spec)
    context = {
        **pages.collection.common,
        "title": f"Restore v{number} of {name} as a new version?",
        "entry": newest.as_dict(),
        "number": number,
        "changed": [f.name for f in changed],
        "note": f"Restore v{number}",
        "note_chars": pages.catalog.limits.change_note_chars,
    }
    return pages.render("confirm_restore_version.html", context)


@router.post("/{name}/versions/{number}/restore")
async def restore_version(form: EditorForm, pages: EntryPagesDep, name: EntryName, number: VersionNumber) -> Response:
    ui, fields = form
    base = _version_field(fields, "base_version")  # the newest the confirmation showed: a save since is a 412
    note = form_field(fields, "change_note") or f"Restore v{number}"
    result = await run_in_threadpool(
        pages.catalog.restore_version,
        pages.kind,
        name,
        number,
        actor=ui.principal.actor(),
        if_match=make_etag(base),
        note=note,
        access=ui.principal,
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
    return pages.redirect(f"{pages.collection.url(name)}?version={view.version}", notice)


@router.get("/{name}/archive")
def archive_confirm(ui: Editor, pages: EntryPagesDep, name: EntryName) -> Response:
    view = pages.catalog.get(pages.kind, name, access=ui.principal)
    context = {**pages.collection.common, "title": f"Archive {name}?", "entry": view.as_dict(), "action": "archive"}
    return pages.render("confirm_archive.html", context)


@router.get("/{name}/restore")
def restore_confirm(ui: Editor, pages: EntryPagesDep, name: EntryName) -> Response:
    view = pages.catalog.get(pages.kind, name, access=ui.principal)
    context = {**pages.collection.common, "title": f"Restore {name}?", "entry": view.as_dict(), "action": "restore"}
    return pages.render("confirm_archive.html", context)


@router.post("/{name}/archive")
async def archive(form: EditorForm, pages: EntryPagesDep, name: EntryName) -> Response:
    ui, _fields = form
    await run_in_threadpool(
        pages.catalog.set_archived, pages.kind, name, True, actor=ui.principal.actor(), access=ui.principal
    )
    return pages.redirect(pages.collection.url(name), f"{name} is archived: agents no longer see it.")


@router.post("/{name}/restore")
async def restore(form: EditorForm, pages: EntryPagesDep, name: EntryName) -> Response:
    ui, _fields = form
    await run_in_threadpool(
        pages.catalog.set_archived, pages.kind, name, False, actor=ui.principal.actor(), access=ui.principal
    )
    return pages.redirect(pages.collection.url(name), f"{name} is restored: agents see it again.")


@router.get("/{name}/team")
def team_confirm(
    ui: Editor, pages: EntryPagesDep, name: EntryName, team: Annotated[str | None, Query(max_length=64)] = None
) -> Response:
    view = pages.catalog.get(pages.kind, name, access=ui.principal)
    if not ui.may_edit(view.team):
        where = f"team {view.team!r}" if view.team else "global entries"
        raise Forbidden(f"{pages.kind} {name!r}: moving it needs the editor role on {where}")
    choices = [c for c in team_choices(pages.request, ui) if c != view.team]
    context = {
        **pages.collection.common,
        "title": f"Move {name} to another team?",
        "entry": view.as_dict(),
        "choices": choices,
        "chosen": (team or "").strip(),
    }
    return pages.render("confirm_team.html", context)


@router.post("/{name}/team")
async def move_team(form: EditorForm, pages: EntryPagesDep, name: EntryName) -> Response:
    ui, fields = form
    team = form_field(fields, "team") or None
    reason = form_field(fields, "reason") or None
    if reason is not None and len(reason) > REASON_CHARS:
        raise Invalid(f"the reason has {len(reason)} characters; at most {REASON_CHARS}")
    result = await run_in_threadpool(
        pages.catalog.set_team, pages.kind, name, team, actor=ui.principal.actor(reason), access=ui.principal
    )
    where = f"team {team}" if team else "global (everyone sees it)"
    notice = f"{name} now belongs to {where}." if result.changed else f"{name} already belonged to {where}."
    return pages.redirect(pages.collection.url(name), notice)


def _label_choices(labels: dict[str, int]) -> list[str]:
    return sorted(set(COMMON_LABELS) | {name for name in labels if name != "latest"})


def _matches(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern.removeprefix("^").removesuffix("$"), value) is not None
