"""The entry editors' routes: ``/ui/{collection}/-/new``, ``/{name}/edit``, ``/-/check`` and the
``/{name}/events`` stream (``registry.ui.editor`` says what each does).

Written once for every collection (``registry.ui.collections``); what differs by kind is the
``EntryForm`` in ``FORMS``, which ``EditorDep`` pairs with the collection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from registry.api.deps import RegistryDep
from registry.catalog.errors import CatalogError, Invalid, NotFound, PreconditionFailed, Subject
from registry.catalog.preconditions import make_etag
from registry.catalog.protection import ReviewAsk
from registry.catalog.service import EntryView, WriteResult
from registry.catalog.web_sessions import SignedIn
from registry.limits import LimitExceeded
from registry.ui.auth import Editor, EntryEditorForm, UiForbidden, Viewer
from registry.ui.collections import PREFIX, CollectionDep
from registry.ui.editor import EditorPages, EntryForm, common_state, form_text
from registry.ui.entries import INT32_MAX, EntryName, VersionQuery
from registry.ui.prompt_form import PromptForm
from registry.ui.resource_form import ResourceForm
from registry.ui.teams import team_choices
from registry.ui.templating import PagesDep
from registry.ui.tool_form import ToolForm

#: Open "saved meanwhile" streams one signed-in session may hold (tabs of one person).
STREAMS_PER_SESSION = 16
#: How often an idle event stream sends a comment, so proxies keep it open.
PING_SECONDS = 15
#: Each editable kind's form.
FORMS: dict[str, EntryForm] = {"prompt": PromptForm(), "resource": ResourceForm(), "tool": ToolForm()}

router = APIRouter(prefix=PREFIX)


def entry_editor(pages: PagesDep, registry: RegistryDep, collection: CollectionDep) -> EditorPages:
    """The editor of the route's collection."""
    return EditorPages(pages, registry, collection, FORMS[collection.kind])


EditorDep = Annotated[EditorPages, Depends(entry_editor)]


@router.get("/-/new")
def new_page(request: Request, ui: Editor, editor: EditorDep) -> Response:
    choices = team_choices(request, ui)
    state = {**common_state({}, None), **editor.form.state_from_spec({})}
    state["team"] = (choices[0] or "") if choices else ""
    return editor.render(request, state=state, entry=None, fresh=True)


@router.post("/-/new")
async def create(request: Request, posted: EntryEditorForm, editor: EditorDep) -> Response:
    ui, fields = posted
    draft = editor.read(fields, editor.registry.settings.limits, name=None)
    op = form_text(fields, "op")
    if op and op != "save":
        return await editor.apply_op(request, draft, fields, None, op)
    if draft.problems:
        return editor.problems_page(request, draft, None)
    try:
        result = await run_in_threadpool(
            editor.registry.catalog.create,
            editor.kind,
            draft.spec,
            actor=ui.principal.actor(),
            note=draft.state["change_note"].strip() or None,
            labels=editor.labels(draft.state),
            team=draft.state["team"] or None,
            access=ui.principal,
            review=_review_ask(draft.state),
        )
    except CatalogError as exc:
        return editor.refused(request, draft, None, exc)
    view = result.view
    published = ", ".join(sorted(label for label in view.labels if label != "latest"))
    serves = f"; {published} serves it." if published else "."
    return editor.saved(request, view.name, f"Created {view.name} v1{serves}{_held_notice(result)}", created=True)


@router.get("/{name}/edit")
def edit_page(
    request: Request, ui: Editor, editor: EditorDep, name: EntryName, version: VersionQuery = None
) -> Response:
    # ``version``: the form starts from it (a 404 naming the entry and its history when it has none).
    kind = editor.kind
    view = editor.registry.catalog.get(kind, name, version=version, access=ui.principal)
    if not ui.may_edit(view.team):
        where = f"team {view.team!r}" if view.team else "global entries"
        raise UiForbidden(f"Editing {kind} {name} needs the editor role on {where}.")
    if view.archived:
        raise Invalid(f"{kind} {name!r} is archived; restore it before editing", about=Subject(kind=kind, name=name))
    state = {
        **common_state(view.spec, view.latest_version, view.version),
        **editor.form.state_from_spec(view.spec),
    }
    return editor.render(request, state=state, entry=view, fresh=True)


@router.post("/{name}/edit")
async def save(request: Request, posted: EntryEditorForm, editor: EditorDep, name: EntryName) -> Response:
    ui, fields = posted
    catalog = editor.registry.catalog
    current = await run_in_threadpool(catalog.get, editor.kind, name, access=ui.principal)
    draft = editor.read(fields, editor.registry.settings.limits, name=name)
    op = form_text(fields, "op")
    if op and op != "save":
        return await editor.apply_op(request, draft, fields, current, op)
    if draft.problems:
        return editor.problems_page(request, draft, current)
    base = draft.state["base_version"]
    if not base.isdigit() or not 1 <= int(base) <= INT32_MAX:
        raise Invalid("the form does not say which version it was based on; reload the editor")
    source = draft.state["source_version"] or base
    if not source.isdigit() or not 1 <= int(source) <= int(base):
        raise Invalid("the form does not say which version it started from; reload the editor")
    try:
        result = await run_in_threadpool(
            catalog.update,
            editor.kind,
            name,
            draft.spec,
            actor=ui.principal.actor(),
            if_match=make_etag(int(base)),
            note=draft.state["change_note"].strip() or None,
            labels=editor.labels(draft.state),
            access=ui.principal,
            review=_review_ask(draft.state),
            secrets_from=int(source),
        )
    except PreconditionFailed:
        conflict = await run_in_threadpool(editor.conflict, name, int(base), draft.spec, ui)
        theirs: EntryView = conflict["theirs"]
        conflict["source_version"] = int(source)
        # Started from an older version: masked values still mean that version's; else theirs.
        kept = int(source) if source != base else theirs.latest_version
        state = {
            **draft.state,
            **common_state(conflict["merged"], theirs.latest_version, kept),
            **editor.form.state_from_spec(conflict["merged"]),
            "change_note": draft.state["change_note"],
            "publish": draft.state["publish"],
            **{key: draft.state[key] for key in ("request_review", "cr_title", "cr_description")},
            "publish_when_approved": draft.state["publish_when_approved"],
        }
        return editor.render(request, state=state, entry=theirs, status=409, conflict=conflict)
    except CatalogError as exc:
        return editor.refused(request, draft, current, exc)
    view = result.view
    if not result.changed:
        return editor.saved(request, name, f"Nothing to save: v{view.version} already says this.{_held_notice(result)}")
    published = ", ".join(sorted(label for label, v in view.labels.items() if v == view.version))
    return editor.saved(request, name, f"Saved {name} v{view.version} ({published}).{_held_notice(result)}")


@router.post("/-/check")
async def check(request: Request, posted: EntryEditorForm, editor: EditorDep) -> Response:
    _ui, fields = posted
    editing = form_text(fields, "editing").strip()
    draft = editor.read(fields, editor.registry.settings.limits, name=editing or None)
    values = await run_in_threadpool(editor.run_check, request, draft, fields, new=not editing)
    context = {**editor.collection.common, "state": draft.state, "check": values, "partial": True}
    return editor.pages.render(request, editor.form.check_template, context)


@router.get("/{name}/events")
async def events(
    request: Request,
    ui: Viewer,
    registry: RegistryDep,
    collection: CollectionDep,
    name: EntryName,
    since: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
) -> Response:
    """``saved`` events: a version newer than ``since`` (or the stream's ``Last-Event-ID``,
    after a reconnect) exists: which, who, the note."""
    watchers = registry.watchers
    if watchers.count >= watchers.capacity:
        raise LimitExceeded(
            "ui_event_streams", f"this server already follows {watchers.capacity} open pages; try again later"
        )
    counts = watchers.streams
    key = ui.csrf_token  # one per signed-in session, and not the session's secret
    if counts.get(key, 0) >= STREAMS_PER_SESSION:
        raise UiForbidden(f"This session already follows {STREAMS_PER_SESSION} open pages; close some tabs.")
    resumed = request.headers.get("last-event-id", "")
    seen = max(since, int(resumed) if resumed.isdigit() and len(resumed) <= 10 else 0)

    async def saves() -> AsyncIterator[ServerSentEvent]:
        latest = seen
        counts[key] = counts.get(key, 0) + 1
        try:
            with watchers.watch(collection.kind, name) as woken:
                while True:
                    woken.clear()
                    try:
                        view = await run_in_threadpool(registry.catalog.get, collection.kind, name, access=ui.principal)
                    except NotFound:
                        yield ServerSentEvent(event="gone", data=json.dumps({"name": name}))
                        return
                    except Exception:  # the database is away: look again when woken, or soon
                        view = None
                    if view is not None and view.latest_version > latest:
                        latest = view.latest_version
                        yield ServerSentEvent(event="saved", data=json.dumps(_saved_event(view, ui)), id=str(latest))
                    await _wait(woken, timeout=30.0)
        finally:
            left = counts.get(key, 0) - 1
            if left > 0:
                counts[key] = left
            else:
                counts.pop(key, None)

    return EventSourceResponse(saves(), ping=PING_SECONDS, headers={"Cache-Control": "no-store"})


def _saved_event(view: EntryView, ui: SignedIn) -> dict[str, Any]:
    return {
        "version": view.latest_version,
        "author": view.author,
        "by_you": view.author == ui.principal.name,
        "note": (view.change_note or "")[:200],
    }


async def _wait(event: asyncio.Event, *, timeout: float) -> None:
    # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that lands
    # in the turn the event is set (CPython gh-86296), and the stream would outlive its client.
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()


def _review_ask(state: Mapping[str, Any]) -> ReviewAsk | None:
    """The change requests a save asks for when its label is protected ("Request review"), with
    the title, description and "publish when approved" typed beside it (the service bounds them)."""
    if not state.get("request_review"):
        return None
    return ReviewAsk(
        title=str(state.get("cr_title") or "").strip() or None,
        description=str(state.get("cr_description") or "").strip() or None,
        publish_when_approved=bool(state.get("publish_when_approved")),
    )


def _held_notice(result: WriteResult) -> str:
    """What a save says about the protected labels it did not move."""
    if not result.held:
        return ""
    held = ", ".join(result.held)
    if result.change_requests:
        opened = ", ".join(f"#{number}" for number in result.change_requests)
        return (
            f" {held} is protected, so it still serves the version before: change request {opened} asks "
            "reviewers to move it."
        )
    return f" {held} is protected, so it still serves the version before (no review was requested)."
