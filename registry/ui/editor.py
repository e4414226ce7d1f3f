"""Creating and editing entries in the browser: the editor pages, saving, conflicts, live checks
and the "saved meanwhile" banner.

One router per kind; what differs by kind (the form's fields, how they become a definition,
what the live panel shows) is an ``EntryForm`` (``registry.ui.prompt_form`` and its siblings).
The rest is shared:

- **Pages.** ``/ui/{collection}/-/new`` and ``/ui/{collection}/{name}/edit`` (``?version=N``:
  start from version N, e.g. the one production serves, not the newest). ``-`` cannot be
  mistaken for an entry: no entry page has a second path segment called ``new``. A form's buttons
  that add or remove a row post the whole form back (``op``) and get it again, changed, so the
  editor works without JavaScript too; nothing is saved until "Save". With JavaScript the same post
  is made by htmx, which swaps in only the rows' container from the answer (``hx-select``): one
  renderer, and the rows numbered as the next post is read.
- **Saving** goes through the catalog service, as the REST API's PUT does: the form carries the
  version that was the newest when the editor opened (``base_version``), sent as ``If-Match``,
  and the version its text started from (``source_version``; the same unless opened with
  ``?version=N``), whose stored write-only values a masked header or secret keeps; the change
  note, and which label the save publishes to (production, or only staging). Starting from an
  older version is no conflict: only a save made after the editor opened is.
- **No lost work.** When someone saved meanwhile, the save is refused (412) and the page comes
  back as a conflict view: their change as a diff against the base, and the form holding my edits
  re-applied on top of their version (``registry.catalog.drafts.reapply``), its base moved to
  theirs, so "Save" now saves mine on top. Fields we both changed keep my text and are named.
- **Live checks.** While someone types, htmx posts the form to ``/-/check`` and swaps in the
  kind's panel (problems with template line numbers; for prompts the rendered preview).
- **Drafts.** The browser keeps the form as a draft while someone types (``admin_ui/static/drafts.js``,
  per signed-in person and entry), so an ended session loses nothing: a live check answers 401 and
  the page stays; a save is refused with a sign-in page that leads back here. A fresh editor page
  (``fresh``) is where a stored draft is offered back; restoring posts it with ``op=restore``,
  which renders the form from it, as a row button does (so a draft with more rows than the stored
  entry comes back whole, its ``base_version`` with it: a save on top of a newer version goes
  through the conflict view). A successful save leaves a marker for the next page
  (``set_saved_marker``), which drops the draft.
- **Banner.** ``/{name}/events`` is a server-sent event stream (``sse-starlette``) that tells an
  open page when a newer version of its entry exists, whichever replica saved it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response

from registry.catalog.drafts import DraftIssue, reapply
from registry.catalog.errors import CatalogError, Invalid, NotFound, PreconditionFailed, Subject
from registry.catalog.preconditions import make_etag
from registry.catalog.protection import ReviewAsk
from registry.catalog.service import CatalogService, EntryView, WriteResult
from registry.catalog.specs import dump_spec, is_label
from registry.limits import LimitExceeded, Limits
from registry.runtime import Registry
from registry.tokens import Principal
from registry.ui.auth import Editor, EntryEditorForm, UiForbidden, Viewer, is_https, signed_in
from registry.ui.diffview import diff_specs
from registry.ui.entries import EntryName, VersionQuery
from registry.ui.security import allow_style_nonce
from registry.ui.sessions import SignedIn
from registry.ui.teams import team_choices
from registry.ui.templating import Pages, friendly_where, set_flash, set_saved_marker

#: Where a save publishes: the label it moves besides ``latest`` (``publish_choices`` says what happens).
PUBLISH_CHOICES = (("production", "production"), ("staging", "staging only"))
#: What a save to each label does for agents, when the label is not protected ...
_PUBLISH_EFFECT = {
    "production": "agents get it at once",
    "staging": "agents reading staging get it at once; production keeps serving its current version",
}
#: ... and when it is (a save makes the version; the label waits for a change request).
_HELD_EFFECT = (
    "protected: saving creates the version; agents {who} keep the current one until a reviewer approves the "
    "change request and it is published"
)
#: Open "saved meanwhile" streams one signed-in session may hold (tabs of one person).
STREAMS_PER_SESSION = 16
#: How often an idle event stream sends a comment, so proxies keep it open.
PING_SECONDS = 15
INT32_MAX = 2**31 - 1


@dataclass
class Draft:
    """What a posted form holds: ``state`` re-renders the form exactly as it was sent (text that
    is not valid yet included); ``spec`` is the definition it makes, as the REST API takes it."""

    state: dict[str, Any]
    spec: dict[str, Any]
    #: Problems found reading the form itself (a JSON field that is not JSON, too many rows).
    problems: list[DraftIssue] = field(default_factory=list)


class EntryForm(Protocol):
    """What one kind's editor adds to the shared one."""

    kind: str
    #: Included in ``editor.html``: the kind's own fields (they read ``state``).
    fields_template: str
    #: The live panel, swapped in by the checks (it reads ``check``).
    check_template: str

    def state_from_spec(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The form's values for a stored (masked) definition; ``{}`` for a new entry."""
        ...

    def read(self, form: FormData, limits: Limits) -> Draft:
        """The kind's fields of a posted form (the shared ones are read by the editor)."""
        ...

    def apply_op(self, state: dict[str, Any], op: str) -> bool:
        """Apply a row button (``add-argument``, ``remove-message-2``, ...); False if unknown."""
        ...

    def check(self, request: Request, draft: Draft, form: FormData, issues: list[DraftIssue]) -> dict[str, Any]:
        """Values for ``check_template`` (called in a worker thread: it may render or fetch)."""
        ...


def publish_choices(protected: Iterable[str]) -> list[tuple[str, str]]:
    """(value, text) per "Publish to" option, the text saying what saving there does for agents:
    at once, or (a protected label) only once a change request is approved and published."""
    held = set(protected)
    choices = []
    for value, name in PUBLISH_CHOICES:
        if value in held:
            effect = _HELD_EFFECT.format(who="served production" if value == "production" else f"reading {value}")
        else:
            effect = _PUBLISH_EFFECT[value]
        choices.append((value, f"{name} — {effect}"))
    return choices


def apply_row_op(state: dict[str, Any], op: str, rows: Mapping[str, Callable[[], dict[str, Any]]]) -> bool:
    """The row buttons every form has: ``add-<row>`` appends a new row (``rows[<row>]()``) to
    ``state["<row>s"]``, ``remove-<row>-<n>`` deletes the n-th. False for any other ``op``."""
    for row, new in rows.items():
        if op == f"add-{row}":
            state[row + "s"].append(new())
            return True
        prefix = f"remove-{row}-"
        index = op.removeprefix(prefix)
        if op.startswith(prefix) and index.isdigit() and int(index) < len(state[row + "s"]):
            del state[row + "s"][int(index)]
            return True
    return False


#: Pydantic's words for a value its field's pattern refuses: they quote the regular expression.
_PATTERN_REFUSED = re.compile(r"String should match pattern '.*'", re.DOTALL)
#: What the form says instead, by where the value is (``friendly_message``).
_PATTERN_RULES = (
    (re.compile(r"name"), "use 1 to 128 characters, each a letter, a digit or one of _ . - (no spaces)"),
    (re.compile(r"arguments\.\d+\.name"), "start with a letter or _, then letters, digits or _ (at most 64)"),
    (re.compile(r"tags\.\d+"), "use 1 to 64 characters, each a letter, a digit or one of _ . : - (no spaces)"),
)


def friendly_message(where: str, message: str) -> str:
    """``message`` (a problem at ``where``) with a refused pattern said in words, not as the regex."""
    if not _PATTERN_REFUSED.search(message):
        return message
    for pattern, rule in _PATTERN_RULES:
        if pattern.fullmatch(where):
            return _PATTERN_REFUSED.sub(rule, message)
    return _PATTERN_REFUSED.sub("has characters it may not have", message)


def _registry(request: Request) -> Registry:
    registry: Registry = request.app.state.registry
    return registry


def _catalog(request: Request) -> CatalogService:
    return _registry(request).catalog


def session_access(request: Request) -> Principal:
    """Who this page acts for (the catalog checks what they see and may edit): the request's
    signed-in session, which every editor route requires."""
    ui = signed_in(request)
    if ui is None:
        raise UiForbidden("This needs a signed-in session.")
    return ui.principal


def _text(form: FormData, key: str) -> str:
    value = form.get(key)
    return value if isinstance(value, str) else ""


def _read_common(form: FormData, *, name: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(state, spec fields) of the fields every kind has; ``name`` when editing an entry."""
    state: dict[str, Any] = {
        "name": name if name is not None else _text(form, "name").strip(),
        "title": _text(form, "title"),
        "description": _text(form, "description"),
        "tags": _text(form, "tags"),
        "change_note": _text(form, "change_note"),
        "publish": _text(form, "publish") or "production",
        "base_version": _text(form, "base_version"),
        "source_version": _text(form, "source_version"),
        "request_review": _text(form, "request_review") == "1",
        # The change request a save to a protected label opens (bounded by the service: title_chars,
        # description_chars; the form keeps the text when it refuses).
        "cr_title": _text(form, "cr_title"),
        "cr_description": _text(form, "cr_description"),
        "publish_when_approved": _text(form, "publish_when_approved") == "1",
        "team": _text(form, "team").strip(),
    }
    spec: dict[str, Any] = {"name": state["name"]}
    if state["title"].strip():
        spec["title"] = state["title"].strip()
    if state["description"].strip():
        spec["description"] = state["description"].strip()
    tags = [t.strip() for t in state["tags"].replace("\n", ",").split(",") if t.strip()]
    if tags:
        spec["tags"] = tags
    return state, spec


def _common_state(spec: Mapping[str, Any], version: int | None, source: int | None = None) -> dict[str, Any]:
    """The shared fields for ``spec``: ``version`` the newest when the editor opened (what a save
    must still find), ``source`` the version the text comes from (default: that one)."""
    source = source if source is not None else version
    return {
        "name": spec.get("name", ""),
        "title": spec.get("title") or "",
        "description": spec.get("description") or "",
        "tags": ", ".join(spec.get("tags") or []),
        "change_note": "",
        "publish": "production",
        "base_version": str(version) if version is not None else "",
        "source_version": str(source) if source is not None else "",
        "request_review": True,  # when the label published to is protected (the form says so)
        "cr_title": "",
        "cr_description": "",
        "publish_when_approved": False,
        "team": "",
    }


class EditorPages:
    """The editor of one kind, mounted at ``/ui/{collection}``."""

    def __init__(self, pages: Pages, collection: str, kind: str, title: str, form: EntryForm) -> None:
        self.pages = pages
        self.collection = collection
        self.kind = kind
        self.title = title
        self.form = form
        self.common = {"collection": collection, "kind": kind, "kind_title": title, "nav": collection}

    # ------------------------------------------------------------------ reading a post
    def read(self, form: FormData, limits: Limits, *, name: str | None) -> Draft:
        state, spec = _read_common(form, name=name)
        draft = self.form.read(form, limits)
        draft.state = {**state, **draft.state}
        draft.spec = {**spec, **draft.spec}
        return draft

    def labels(self, state: Mapping[str, Any]) -> list[str]:
        publish = state.get("publish") or "production"
        if publish not in dict(PUBLISH_CHOICES) or not is_label(publish):
            raise Invalid(f"publish to {publish!r}? Choose production or staging")
        return [publish]

    # ------------------------------------------------------------------ rendering
    def render(
        self,
        request: Request,
        *,
        state: dict[str, Any],
        entry: EntryView | None,
        status: int = 200,
        error: str | None = None,
        details: list[str] | None = None,
        conflict: dict[str, Any] | None = None,
        check: dict[str, Any] | None = None,
        fresh: bool = False,
        restored: bool = False,
    ) -> Response:
        """The editor page. ``fresh``: the form holds the stored entry (or a blank one), not a
        post, so the browser may offer a kept draft; ``restored``: it holds a draft restored."""
        name = entry.name if entry is not None else None
        action = f"/ui/{self.collection}/{name}/edit" if name else f"/ui/{self.collection}/-/new"
        ui = signed_in(request)
        protected = sorted(_registry(request).protection.names_hint())
        code_editor = bool(getattr(self.form, "code_editor", False))
        context = {
            **self.common,
            "title": f"Edit {self.title.lower()} {name}" if name else f"New {self.title.lower()}",
            "entry": entry.as_dict() if entry is not None else None,
            "state": state,
            "action": action,
            "check_url": f"/ui/{self.collection}/-/check",
            "events_url": f"/ui/{self.collection}/{name}/events" if name else None,
            "publish_choices": publish_choices(protected),
            "fields_template": self.form.fields_template,
            "check_template": self.form.check_template,
            # A kind whose form uploads a file (a resource's blob) posts multipart/form-data.
            "multipart": bool(getattr(self.form, "multipart", False)),
            "error": error,
            "details": details or [],
            "conflict": conflict,
            "check": check,
            "fresh": fresh,
            "restored": restored,
            # What drafts.js keys this form's draft by, and the page it comes back to.
            "draft_url": action,
            "tab": "edit",
            "partial": False,
            # A new entry's owner: where this session may create entries (None: global).
            "team_choices": team_choices(request, ui) if ui is not None and entry is None else [],
            # Labels a save does not move (the form offers a change request for them).
            "protected_labels": protected,
            "source": _source(state, entry),
            # A kind whose templates get the code editor (CodeMirror): it styles itself with <style>
            # elements, which carry this response's nonce.
            "code_editor": code_editor,
            "style_nonce": allow_style_nonce(request) if code_editor else None,
        }
        # What a kind's live panel needs on a full page besides ``state`` (the prompt's preview fields).
        panel_context = getattr(self.form, "panel_context", None)
        if panel_context is not None:
            context.update(panel_context(state))
        return self.pages.render(request, "editor.html", context, status=status)

    def run_check(self, request: Request, draft: Draft, form: FormData, *, new: bool = False) -> dict[str, Any]:
        """The live panel's values. For a ``new`` entry an empty name is not listed as a problem
        (a blank form is checked on load, before anyone typed): the panel says it is still needed
        (``name_pending``), and a save without one is refused as ever."""
        issues = list(draft.problems) or _registry(request).drafts.issues(self.kind, draft.spec)
        pending = new and not draft.state["name"] and any(issue.where == "name" for issue in issues)
        if pending:
            issues = [issue for issue in issues if issue.where != "name"]
        issues = [DraftIssue(i.where, friendly_message(i.where, i.message), i.line) for i in issues]
        values = self.form.check(request, draft, form, issues)
        values["name_pending"] = pending
        return values

    # ------------------------------------------------------------------ conflict view
    def conflict(self, request: Request, name: str, base: int, mine: dict[str, Any], ui: SignedIn) -> dict[str, Any]:
        catalog = _catalog(request)
        theirs = catalog.get(self.kind, name, access=ui.principal)
        try:
            base_spec = catalog.get(self.kind, name, version=base, access=ui.principal).spec
        except NotFound:
            base_spec = {}
        # Compared in the stored form (defaults dropped), as both other sides are.
        merged = reapply(base_spec, theirs.spec, dump_spec(catalog.parse_spec(self.kind, mine)))
        changed, _same = diff_specs(base_spec, theirs.spec)
        return {
            "theirs": theirs,
            "merged": merged.merged,
            "mine": merged.mine,
            "both": merged.both,
            "their_fields": merged.theirs,
            "from_version": base,
            "to_version": theirs.latest_version,
            "changed": changed,
        }


def editor_router(pages: Pages, collection: str, kind: str, title: str, form: EntryForm) -> APIRouter:
    routes = APIRouter(prefix=f"/{collection}")
    editor = EditorPages(pages, collection, kind, title, form)

    def saved(request: Request, name: str, notice: str, *, created: bool = False) -> Response:
        response = RedirectResponse(f"/ui/{collection}/{name}", status_code=303)
        set_flash(response, notice, secure=is_https(request))
        set_saved_marker(response, kind, name, created=created, secure=is_https(request))
        return response

    def refused(request: Request, draft: Draft, entry: EntryView | None, exc: CatalogError) -> Response:
        details = [
            f"{friendly_where(str(e['loc']))}: {friendly_message(str(e['loc']), str(e.get('msg', '')))}"
            if e.get("loc")
            else str(e.get("msg", e))
            for e in exc.errors or []
        ]
        # The headline repeats the first problem as the API words it (a regex, for a refused name).
        error = "The form has problems." if details and _PATTERN_REFUSED.search(exc.detail) else exc.detail
        return editor.render(
            request, state=draft.state, entry=entry, status=exc.status, error=error, details=details[:20]
        )

    @routes.get("/-/new")
    def new_page(request: Request, ui: Editor) -> Response:
        choices = team_choices(request, ui)
        state = {**_common_state({}, None), **form.state_from_spec({})}
        state["team"] = (choices[0] or "") if choices else ""
        return editor.render(request, state=state, entry=None, fresh=True)

    @routes.post("/-/new")
    async def create(request: Request, posted: EntryEditorForm) -> Response:
        ui, fields = posted
        draft = editor.read(fields, _limits(request), name=None)
        op = _text(fields, "op")
        if op and op != "save":
            return await _apply_op(request, draft, fields, None, op)
        if draft.problems:
            return _problems_page(request, draft, None)
        try:
            result = await run_in_threadpool(
                _catalog(request).create,
                kind,
                draft.spec,
                actor=ui.principal.actor(),
                note=draft.state["change_note"].strip() or None,
                labels=editor.labels(draft.state),
                team=draft.state["team"] or None,
                access=ui.principal,
                review=_review_ask(draft.state),
            )
        except CatalogError as exc:
            return refused(request, draft, None, exc)
        view = result.view
        published = ", ".join(sorted(label for label in view.labels if label != "latest"))
        serves = f"; {published} serves it." if published else "."
        return saved(request, view.name, f"Created {view.name} v1{serves}{_held_notice(result)}", created=True)

    @routes.get("/{name}/edit")
    def edit_page(request: Request, ui: Editor, name: EntryName, version: VersionQuery = None) -> Response:
        # ``version``: the form starts from it (a 404 naming the entry and its history when it has none).
        view = _catalog(request).get(kind, name, version=version, access=ui.principal)
        if not ui.may_edit(view.team):
            where = f"team {view.team!r}" if view.team else "global entries"
            raise UiForbidden(f"Editing {kind} {name} needs the editor role on {where}.")
        if view.archived:
            raise Invalid(
                f"{kind} {name!r} is archived; restore it before editing", about=Subject(kind=kind, name=name)
            )
        state = {
            **_common_state(view.spec, view.latest_version, view.version),
            **form.state_from_spec(view.spec),
        }
        return editor.render(request, state=state, entry=view, fresh=True)

    @routes.post("/{name}/edit")
    async def save(request: Request, posted: EntryEditorForm, name: EntryName) -> Response:
        ui, fields = posted
        catalog = _catalog(request)
        current = await run_in_threadpool(catalog.get, kind, name, access=ui.principal)
        draft = editor.read(fields, _limits(request), name=name)
        op = _text(fields, "op")
        if op and op != "save":
            return await _apply_op(request, draft, fields, current, op)
        if draft.problems:
            return _problems_page(request, draft, current)
        base = draft.state["base_version"]
        if not base.isdigit() or not 1 <= int(base) <= INT32_MAX:
            raise Invalid("the form does not say which version it was based on; reload the editor")
        source = draft.state["source_version"] or base
        if not source.isdigit() or not 1 <= int(source) <= int(base):
            raise Invalid("the form does not say which version it started from; reload the editor")
        try:
            result = await run_in_threadpool(
                catalog.update,
                kind,
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
            conflict = await run_in_threadpool(editor.conflict, request, name, int(base), draft.spec, ui)
            theirs: EntryView = conflict["theirs"]
            conflict["source_version"] = int(source)
            # Started from an older version: masked values still mean that version's; else theirs.
            kept = int(source) if source != base else theirs.latest_version
            state = {
                **draft.state,
                **_common_state(conflict["merged"], theirs.latest_version, kept),
                **form.state_from_spec(conflict["merged"]),
                "change_note": draft.state["change_note"],
                "publish": draft.state["publish"],
                **{key: draft.state[key] for key in ("request_review", "cr_title", "cr_description")},
                "publish_when_approved": draft.state["publish_when_approved"],
            }
            return editor.render(request, state=state, entry=theirs, status=409, conflict=conflict)
        except CatalogError as exc:
            return refused(request, draft, current, exc)
        view = result.view
        if not result.changed:
            return saved(request, name, f"Nothing to save: v{view.version} already says this.{_held_notice(result)}")
        published = ", ".join(sorted(label for label, v in view.labels.items() if v == view.version))
        return saved(request, name, f"Saved {name} v{view.version} ({published}).{_held_notice(result)}")

    @routes.post("/-/check")
    async def check(request: Request, posted: EntryEditorForm) -> Response:
        _ui, fields = posted
        editing = _text(fields, "editing").strip()
        draft = editor.read(fields, _limits(request), name=editing or None)
        values = await run_in_threadpool(editor.run_check, request, draft, fields, new=not editing)
        context = {**editor.common, "state": draft.state, "check": values, "partial": True}
        return pages.render(request, form.check_template, context)

    async def _apply_op(request: Request, draft: Draft, fields: FormData, entry: EntryView | None, op: str) -> Response:
        # Besides "check", a kind may name buttons that are checks too (a resource's "fetch").
        # "restore" is drafts.js posting a kept draft back: the form rendered from it, checked.
        checking = op in ("check", "restore") or op in getattr(form, "check_ops", frozenset())
        if not checking and not form.apply_op(draft.state, op):
            raise Invalid(f"unknown form action {op[:40]!r}")
        values = (
            await run_in_threadpool(editor.run_check, request, draft, fields, new=entry is None) if checking else None
        )
        return editor.render(request, state=draft.state, entry=entry, check=values, restored=op == "restore")

    def _problems_page(request: Request, draft: Draft, entry: EntryView | None) -> Response:
        messages = [f"{p.where}: {p.message}" for p in draft.problems]
        return editor.render(
            request, state=draft.state, entry=entry, status=422, error="The form has problems.", details=messages
        )

    @routes.get("/{name}/events")
    async def events(
        request: Request,
        ui: Viewer,
        name: EntryName,
        since: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
    ) -> Response:
        """``saved`` events: a version newer than ``since`` (or the stream's ``Last-Event-ID``,
        after a reconnect) exists: which, who, the note."""
        registry = _registry(request)
        watchers = registry.watchers
        if watchers.count >= watchers.capacity:
            raise LimitExceeded(
                "ui_event_streams", f"this server already follows {watchers.capacity} open pages; try again later"
            )
        counts = _stream_counts(request)
        key = ui.csrf_token  # one per signed-in session, and not the session's secret
        if counts.get(key, 0) >= STREAMS_PER_SESSION:
            raise UiForbidden(f"This session already follows {STREAMS_PER_SESSION} open pages; close some tabs.")
        resumed = request.headers.get("last-event-id", "")
        seen = max(since, int(resumed) if resumed.isdigit() and len(resumed) <= 10 else 0)

        async def saves() -> AsyncIterator[ServerSentEvent]:
            latest = seen
            counts[key] = counts.get(key, 0) + 1
            try:
                with watchers.watch(kind, name) as woken:
                    while True:
                        woken.clear()
                        try:
                            view = await run_in_threadpool(registry.catalog.get, kind, name, access=ui.principal)
                        except NotFound:
                            yield ServerSentEvent(event="gone", data=json.dumps({"name": name}))
                            return
                        except Exception:  # the database is away: look again when woken, or soon
                            view = None
                        if view is not None and view.latest_version > latest:
                            latest = view.latest_version
                            yield ServerSentEvent(
                                event="saved", data=json.dumps(_saved_event(view, ui)), id=str(latest)
                            )
                        await _wait(woken, timeout=30.0)
            finally:
                left = counts.get(key, 0) - 1
                if left > 0:
                    counts[key] = left
                else:
                    counts.pop(key, None)

        return EventSourceResponse(saves(), ping=PING_SECONDS, headers={"Cache-Control": "no-store"})

    return routes


def _source(state: Mapping[str, Any], entry: EntryView | None) -> dict[str, Any] | None:
    """What the editor says it starts from: the version, the labels on it, and the newest
    version's when that is another one ("Editing from v6 (production); v9 is the newest (staging)")."""
    raw = str(state.get("source_version") or "")
    if entry is None or not raw.isdigit():
        return None
    number = int(raw)

    def labels_on(version: int) -> list[str]:
        return sorted(label for label, v in entry.labels.items() if v == version and label != "latest")

    newest = entry.latest_version
    return {
        "version": number,
        "labels": labels_on(number),
        "newest": newest,
        "newest_labels": labels_on(newest),
        "is_newest": number == newest,
    }


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


def _limits(request: Request) -> Limits:
    return _registry(request).settings.limits


def _stream_counts(request: Request) -> dict[str, int]:
    counts: dict[str, int] = request.app.state.__dict__.setdefault("_ui_event_streams", {})
    return counts
