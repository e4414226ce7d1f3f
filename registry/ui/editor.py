"""Creating and editing entries in the browser: the editor pages, saving, conflicts, live checks
and the "saved meanwhile" banner.

One editor for every kind (its routes: ``registry.ui.editor_routes``); what differs by kind (the
form's fields, how they become a definition, what the live panel shows) is an ``EntryForm``
(``registry.ui.prompt_form`` and its siblings). The rest is shared:

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

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response

from registry.catalog.drafts import DraftIssue, draft_issues, reapply
from registry.catalog.errors import CatalogError, Invalid, NotFound
from registry.catalog.service import EntryView
from registry.catalog.specs import dump_spec, is_label
from registry.catalog.web_sessions import SignedIn
from registry.limits import Limits
from registry.runtime import Registry
from registry.tokens import Principal
from registry.ui.auth import UiForbidden, is_https, signed_in
from registry.ui.collections import Collection
from registry.ui.diffview import diff_specs
from registry.ui.security import allow_style_nonce
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


def session_access(request: Request) -> Principal:
    """Who this page acts for (the catalog checks what they see and may edit): the request's
    signed-in session, which every editor route requires."""
    ui = signed_in(request)
    if ui is None:
        raise UiForbidden("This needs a signed-in session.")
    return ui.principal


def form_text(form: FormData, key: str) -> str:
    value = form.get(key)
    return value if isinstance(value, str) else ""


def _read_common(form: FormData, *, name: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(state, spec fields) of the fields every kind has; ``name`` when editing an entry."""
    state: dict[str, Any] = {
        "name": name if name is not None else form_text(form, "name").strip(),
        "title": form_text(form, "title"),
        "description": form_text(form, "description"),
        "tags": form_text(form, "tags"),
        "change_note": form_text(form, "change_note"),
        "publish": form_text(form, "publish") or "production",
        "base_version": form_text(form, "base_version"),
        "source_version": form_text(form, "source_version"),
        "request_review": form_text(form, "request_review") == "1",
        # The change request a save to a protected label opens (bounded by the service: title_chars,
        # description_chars; the form keeps the text when it refuses).
        "cr_title": form_text(form, "cr_title"),
        "cr_description": form_text(form, "cr_description"),
        "publish_when_approved": form_text(form, "publish_when_approved") == "1",
        "team": form_text(form, "team").strip(),
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


def common_state(spec: Mapping[str, Any], version: int | None, source: int | None = None) -> dict[str, Any]:
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
    """The editor of one kind's ``collection`` (``EditorDep`` in ``registry.ui.editor_routes``)."""

    def __init__(self, pages: Pages, registry: Registry, collection: Collection, form: EntryForm) -> None:
        self.pages = pages
        self.registry = registry
        self.collection = collection
        self.kind = collection.kind
        self.form = form

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
        base, title = f"/ui/{self.collection.name}", self.collection.title.lower()
        action = f"{base}/{name}/edit" if name else f"{base}/-/new"
        ui = signed_in(request)
        protected = sorted(self.registry.protection.names_hint())
        code_editor = bool(getattr(self.form, "code_editor", False))
        context = {
            **self.collection.common,
            "title": f"Edit {title} {name}" if name else f"New {title}",
            "entry": entry.as_dict() if entry is not None else None,
            "state": state,
            "action": action,
            "check_url": f"{base}/-/check",
            "events_url": f"{base}/{name}/events" if name else None,
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
        issues = list(draft.problems) or draft_issues(self.registry.catalog, self.kind, draft.spec)
        pending = new and not draft.state["name"] and any(issue.where == "name" for issue in issues)
        if pending:
            issues = [issue for issue in issues if issue.where != "name"]
        issues = [DraftIssue(i.where, friendly_message(i.where, i.message), i.line) for i in issues]
        values = self.form.check(request, draft, form, issues)
        values["name_pending"] = pending
        return values

    # ------------------------------------------------------------------ conflict view
    def conflict(self, name: str, base: int, mine: dict[str, Any], ui: SignedIn) -> dict[str, Any]:
        catalog = self.registry.catalog
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

    # ------------------------------------------------------------------ answers to a post
    def saved(self, request: Request, name: str, notice: str, *, created: bool = False) -> Response:
        """After a save: the entry's page, with the notice and the marker that drops the draft."""
        response = RedirectResponse(self.collection.url(name), status_code=303)
        set_flash(response, notice, secure=is_https(request))
        set_saved_marker(response, self.kind, name, created=created, secure=is_https(request))
        return response

    def refused(self, request: Request, draft: Draft, entry: EntryView | None, exc: CatalogError) -> Response:
        details = [
            f"{friendly_where(str(e['loc']))}: {friendly_message(str(e['loc']), str(e.get('msg', '')))}"
            if e.get("loc")
            else str(e.get("msg", e))
            for e in exc.errors or []
        ]
        # The headline repeats the first problem as the API words it (a regex, for a refused name).
        error = "The form has problems." if details and _PATTERN_REFUSED.search(exc.detail) else exc.detail
        return self.render(
            request, state=draft.state, entry=entry, status=exc.status, error=error, details=details[:20]
        )

    def problems_page(self, request: Request, draft: Draft, entry: EntryView | None) -> Response:
        messages = [f"{p.where}: {p.message}" for p in draft.problems]
        return self.render(
            request, state=draft.state, entry=entry, status=422, error="The form has problems.", details=messages
        )

    async def apply_op(
        self, request: Request, draft: Draft, fields: FormData, entry: EntryView | None, op: str
    ) -> Response:
        """A button other than Save: a row added or removed, a check, a kept draft restored."""
        # Besides "check", a kind may name buttons that are checks too (a resource's "fetch").
        # "restore" is drafts.js posting a kept draft back: the form rendered from it, checked.
        checking = op in ("check", "restore") or op in getattr(self.form, "check_ops", frozenset())
        if not checking and not self.form.apply_op(draft.state, op):
            raise Invalid(f"unknown form action {op[:40]!r}")
        values = (
            await run_in_threadpool(self.run_check, request, draft, fields, new=entry is None) if checking else None
        )
        return self.render(request, state=draft.state, entry=entry, check=values, restored=op == "restore")


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
