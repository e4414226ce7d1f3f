"""``/ui/tools/{name}/test``: run a tool as an agent's ``tools/call`` would, from a form, and watch
its progress and log messages arrive while its webhook works.

Editors only: a test call calls the tool's webhook, which may do things. The call goes through the
very runner the admin API's ``POST /api/v1/tools/{name}/test`` uses
(``registry.catalog.tool_calls.resolve_tool_test`` / ``run_tool_test``), so the arguments are
validated, the webhook signed, SSRF-guarded and timed out, and the result mapped and checked
exactly as for an agent.

**How the notifications reach the page.** The form is POSTed (CSRF-checked like every form) and,
when the page's script sent it with ``fetch()`` and ``Accept: text/event-stream``, the answer *is*
the stream: server-sent events (``sse-starlette``'s ``EventSourceResponse``) read with a
``ReadableStream`` reader. Why not POST, then ``EventSource`` on a run id: that needs the run held
in a per-process registry between the two requests (with a TTL, and a run nobody ever collects),
and behind a load balancer the GET may land on another replica, which has never heard of the run.
One request keeps the run, its bounds and its cancellation in one place: it lives exactly as long
as the connection; when the browser goes away (tab closed, the Stop button aborting the fetch),
the stream's task is cancelled and the webhook call with it. With JavaScript off the same POST
(no ``Accept: text/event-stream``) waits for the call and answers the page with the result and
the notifications listed.

Events, each ``data`` one JSON object: ``started`` (which version runs), ``notification``
(``{"t": seconds since the start, "notification": the MCP notification}``), then one of ``result``
(``{"result": CallToolResult, "omitted": notifications not shown}``) or ``failed``
(``{"message": ...}``: the run could not be made, e.g. too many at once).

**Bounds.** The form's body is bounded by ``REGISTRY_LIMIT_BODY_BYTES`` (``read_form``), raw JSON
by the JSON structure limits; the call by the tool's own ``timeout_s``; progress by the relay's
``REGISTRY_LIMIT_PROGRESS_PER_SECOND``; the notifications shown by ``MAX_SHOWN_NOTIFICATIONS``
(the rest are counted); the calls running at once by ``RUNS_PER_SESSION`` and ``RUNS_PER_PROCESS``.
"""

from __future__ import annotations

import asyncio
import binascii
import functools
import hashlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from registry.api.deps import CatalogDep, SettingsDep, get_registry
from registry.catalog.errors import CatalogError, Invalid, NotFound
from registry.catalog.service import CatalogService
from registry.catalog.specs import is_label
from registry.catalog.tool_calls import ToolTest, resolve_tool_test, run_tool_test
from registry.catalog.values import EntryView
from registry.catalog.web_sessions import SignedIn
from registry.limits import Limits
from registry.streaming import serve_until_disconnect
from registry.ui.auth import Editor, EditorForm, UiForbidden
from registry.ui.entries import INT32_MAX, EntryName, VersionQuery
from registry.ui.schema_form import (
    ARGUMENTS_FIELD,
    MODE_FIELD,
    FormInputError,
    SchemaForm,
    build_form,
    read_fields,
    read_raw_json,
)
from registry.ui.views import View
from registry.webhooks import IPNetwork, caller_key, parse_networks

log = logging.getLogger("registry.ui")

#: Notifications listed for one call; the rest are counted ("N more not shown").
MAX_SHOWN_NOTIFICATIONS = 200
#: Longest text shown for one notification (a log message's data); longer is cut with "…".
NOTIFICATION_CHARS = 2_000
#: Test calls running at once for one web UI session, and in this process.
RUNS_PER_SESSION = 4
RUNS_PER_PROCESS = 32
#: Image types shown inline (as ``data:`` URLs, which the CSP allows for images); others are described.
INLINE_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
STREAM_MEDIA_TYPE = "text/event-stream"


class TooManyRuns(CatalogError):
    status = 429
    title = "Too many test calls"


class RunSlots:
    """How many test calls run now, per session and in all (this process; one event loop, so no lock)."""

    def __init__(self, per_session: int = RUNS_PER_SESSION, total: int = RUNS_PER_PROCESS) -> None:
        self.per_session = per_session
        self.total = total
        self._running: dict[str, int] = {}

    def check(self, key: str) -> None:
        """Raise ``TooManyRuns`` if one more call for ``key`` would be over a bound."""
        if self._running.get(key, 0) >= self.per_session:
            raise TooManyRuns(
                f"{self.per_session} test calls of yours are running already; at most {self.per_session} "
                "run at once per session. Wait for one to finish, or stop it."
            )
        if sum(self._running.values()) >= self.total:
            raise TooManyRuns(
                f"{self.total} test calls are running on this server already (at most {self.total} at once). "
                "Try again in a moment."
            )

    def acquire(self, key: str) -> None:
        self.check(key)
        self._running[key] = self._running.get(key, 0) + 1

    def release(self, key: str) -> None:
        left = self._running.get(key, 0) - 1
        if left > 0:
            self._running[key] = left
        else:
            self._running.pop(key, None)


def session_key(ui: SignedIn) -> str:
    """Which session a run belongs to (its CSRF token is per session), without keeping the token."""
    return hashlib.sha256(ui.csrf_token.encode()).hexdigest()


@dataclass(frozen=True)
class Choice:
    """Which version a test runs: by label (``production``, ``latest``, ...) or by number."""

    label: str | None
    version: int | None

    def describe(self, number: int) -> str:
        return f"version {number} ({self.label})" if self.label else f"version {number}"


def _choose(labels: Mapping[str, int], label: str | None, version: int | None) -> Choice:
    """The page's choice: a version number, else a label the tool has, else ``production`` (what
    agents call), else ``latest`` for a tool no version of which is in production yet."""
    if version is not None:
        return Choice(None, version)
    if label:
        if not is_label(label):
            raise Invalid(f"{label!r} is not a label name: 1-64 of a-z 0-9 _ . -, starting with a letter or digit")
        if label not in labels:
            raise NotFound(f"this tool has no label {label!r}")
        return Choice(label, None)
    return Choice("production" if "production" in labels else "latest", None)


def _posted_choice(fields: Any) -> Choice:
    label = fields.get("label")
    version = fields.get("version")
    label = label.strip() if isinstance(label, str) else ""
    version = version.strip() if isinstance(version, str) else ""
    if version:
        if not version.isdigit() or not 1 <= int(version) <= INT32_MAX:
            raise Invalid(f"the version must be a whole number from 1 (got {version!r})")
        return Choice(None, int(version))
    if label and not is_label(label):
        raise Invalid(f"{label!r} is not a label name")
    return Choice(label or "production", None)


def _load(catalog: CatalogService, name: str, choice: Choice, ui: SignedIn) -> tuple[ToolTest, EntryView]:
    """The tool as the test runs it, and its newest version (the page's header), in one thread hop."""
    test = resolve_tool_test(catalog, name, version=choice.version, label=choice.label, access=ui.principal)
    return test, catalog.get("tool", name, access=ui.principal)


def _label_options(labels: Mapping[str, int]) -> list[tuple[str, int]]:
    """The labels to offer: production first, the others by name, latest last."""
    ordered = sorted(labels.items(), key=lambda item: (item[0] != "production", item[0] == "latest", item[0]))
    return [(name, number) for name, number in ordered]


# ------------------------------------------------------------------ showing results


def _cut(text: str, limit: int = NOTIFICATION_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def describe_notification(notification: Mapping[str, Any], seconds: float) -> dict[str, Any]:
    """A notification as one line of the page's list (``tool_test.js`` writes the same lines)."""
    params = notification.get("params") or {}
    if notification.get("method") == "notifications/progress":
        text = _number(params.get("progress"))
        if params.get("total") is not None:
            text += " / " + _number(params["total"])
        if params.get("message"):
            text += " — " + str(params["message"])
        return {"t": seconds, "kind": "progress", "level": "progress", "text": _cut(text)}
    data = params.get("data")
    shown = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return {"t": seconds, "kind": "log", "level": str(params.get("level", "info")), "text": _cut(shown)}


def describe_content(block: Any) -> dict[str, Any]:
    """A ``CallToolResult`` content block as the page shows it: text as text, raster images
    inline, everything else described (never as HTML: a webhook's output is untrusted)."""
    if not isinstance(block, Mapping):
        return {"type": "other", "json": json.dumps(block, indent=2, ensure_ascii=False)}
    kind = str(block.get("type", ""))
    if kind == "text":
        return {"type": "text", "text": str(block.get("text", ""))}
    if kind in ("image", "audio"):
        data = block.get("data") if isinstance(block.get("data"), str) else ""
        mime = str(block.get("mimeType", ""))
        inline = kind == "image" and mime in INLINE_IMAGE_TYPES and _BASE64.fullmatch(data or "") is not None
        return {
            "type": kind,
            "mime": mime,
            "size": _decoded_size(data or ""),
            "src": f"data:{mime};base64,{data}" if inline else None,
        }
    if kind == "resource" and isinstance(block.get("resource"), Mapping):
        resource = block["resource"]
        return {
            "type": "resource",
            "uri": str(resource.get("uri", "")),
            "mime": str(resource.get("mimeType", "")),
            "text": resource.get("text") if isinstance(resource.get("text"), str) else None,
            "size": _decoded_size(resource["blob"]) if isinstance(resource.get("blob"), str) else None,
        }
    if kind == "resource_link":
        return {"type": "resource_link", "uri": str(block.get("uri", "")), "name": str(block.get("name", ""))}
    return {"type": "other", "json": json.dumps(block, indent=2, ensure_ascii=False)}


def _decoded_size(data: str) -> int:
    try:
        return len(binascii.a2b_base64(data))
    except (binascii.Error, ValueError):
        return len(data)


def outcome_view(result: Mapping[str, Any], test: ToolTest, notifications: list[dict[str, Any]], omitted: int) -> Any:
    structured = result.get("structuredContent")
    return {
        "is_error": bool(result.get("isError")),
        "blocks": [describe_content(b) for b in result.get("content") or []],
        "structured": json.dumps(structured, indent=2, ensure_ascii=False) if structured is not None else None,
        "raw": json.dumps(result, indent=2, ensure_ascii=False),
        "notifications": notifications,
        "omitted": omitted,
        "ran": Choice(test.label, None if test.label else test.version).describe(test.version),
    }


class _Shown:
    """Counts notifications: the first ``limit`` are shown, the rest only counted."""

    def __init__(self, limit: int = MAX_SHOWN_NOTIFICATIONS) -> None:
        self.limit = limit
        self.shown = 0
        self.omitted = 0
        self.started = time.monotonic()

    def take(self) -> bool:
        if self.shown < self.limit:
            self.shown += 1
            return True
        self.omitted += 1
        return False

    def seconds(self) -> float:
        return round(time.monotonic() - self.started, 3)


#: Tasks of stream runs being cancelled: asyncio keeps only weak references to tasks.
_finishing: set[asyncio.Task[None]] = set()


@dataclass
class ToolTestPages(View):
    catalog: CatalogDep
    settings: SettingsDep

    def page(
        self,
        entry: Any,
        *,
        choice: Choice,
        number: int,
        hook_url: str,
        timeout_s: float,
        form: SchemaForm,
        mode: str,
        raw_json: str,
        error: str | None = None,
        outcome: Any = None,
        status: int = 200,
    ) -> Response:
        context = {
            **_COMMON,
            "title": f"Test call of tool {entry['name']}",
            "entry": entry,
            "choice": choice,
            "number": number,
            "ran_as": choice.describe(number),
            "label_options": _label_options(entry["labels"]),
            "form": form,
            "mode": mode,
            "raw_json": raw_json,
            "error": error,
            "outcome": outcome,
            "webhook_url": hook_url,
            "timeout_s": timeout_s,
            "max_shown": MAX_SHOWN_NOTIFICATIONS,
        }
        return self.render("tool_test.html", context, status=status)


ToolTestPagesDep = Annotated[ToolTestPages, Depends()]
router = APIRouter(prefix="/tools")
#: The test calls running in this process.
SLOTS = RunSlots()
_COMMON = {"collection": "tools", "kind": "tool", "kind_title": "Tool", "nav": "tools", "tab": "test"}


@router.get("/{name}/test")
def test_form(
    ui: Editor,
    pages: ToolTestPagesDep,
    name: EntryName,
    label: Annotated[str | None, Query(max_length=64)] = None,
    version: VersionQuery = None,
) -> Response:
    catalog = pages.catalog
    newest = catalog.get("tool", name, access=ui.principal)
    if not ui.may_edit(newest.team):
        where = f"team {newest.team!r}" if newest.team else "global entries"
        raise UiForbidden(f"A test call of {name} needs the editor role on {where}.")
    choice = _choose(newest.labels, (label or "").strip() or None, version)
    number = choice.version if choice.version is not None else newest.labels[str(choice.label)]
    spec = catalog.get("tool", name, version=number, access=ui.principal).spec  # 404 page: no such version
    hook = spec.get("webhook") or {}
    form = build_form(spec.get("inputSchema", {}))
    return pages.page(
        newest.as_dict(),
        choice=choice,
        number=number,
        hook_url=str(hook.get("url", "")),
        timeout_s=float(hook.get("timeout_s", 30)),
        form=form,
        mode="json" if form.prefer_json else "form",
        raw_json=json.dumps(form.example, indent=2, ensure_ascii=False),
    )


@router.post("/{name}/test")
async def test_run(posted: EditorForm, pages: ToolTestPagesDep, name: EntryName) -> Response:
    ui, fields = posted
    request, limits = pages.request, pages.catalog.limits
    choice = _posted_choice(fields)
    test, newest = await run_in_threadpool(_load, pages.catalog, name, choice, ui)
    form = build_form(test.input_schema)
    mode = "json" if fields.get(MODE_FIELD) == "json" else "form"
    raw_field = fields.get(ARGUMENTS_FIELD)
    raw_json = raw_field if isinstance(raw_field, str) else ""
    error: str | None = None
    arguments: dict[str, Any] = {}
    if mode == "json":
        try:
            arguments = read_raw_json(raw_json, limits)
        except FormInputError as exc:
            error = str(exc)
    else:
        arguments = read_fields(form, fields, limits)
        if form.has_errors:
            error = "Some fields need attention (see the messages below them): nothing was sent."

    def again(**extra: Any) -> Response:
        return pages.page(
            newest.as_dict(),
            choice=choice,
            number=test.version,
            hook_url=test.tool.target.url,
            timeout_s=test.tool.target.timeout_s,
            form=form,
            mode=mode,
            raw_json=raw_json,
            **extra,
        )

    if error is not None:
        return again(error=error, status=400)
    key = session_key(ui)
    allowed = parse_networks(pages.settings.webhook_allowed_networks)
    # The outbound caps count a test call as the signed-in token's or user's, as its MCP calls.
    caller = caller_key(ui.principal.token_id, ui.principal.user, key)
    events = get_registry(request).events
    on_failed = functools.partial(events.tool_test_failed, test.name, test.version, actor=ui.principal.actor())
    if STREAM_MEDIA_TYPE in request.headers.get("accept", ""):
        SLOTS.check(key)  # a refusal now is a page; one lost to a race is a "failed" event
        return EventSourceResponse(
            _stream(test, arguments, allowed, limits, SLOTS, key, caller, on_failed),
            ping=10,
            sep="\n",
        )
    SLOTS.acquire(key)
    try:
        shown_count = _Shown()
        listed: list[dict[str, Any]] = []

        async def collect(notification: dict[str, Any]) -> None:
            if shown_count.take():
                listed.append(describe_notification(notification, shown_count.seconds()))

        result = await serve_until_disconnect(
            run_tool_test(
                test,
                arguments,
                allowed_networks=allowed,
                limits=limits,
                on_notification=collect,
                caller=caller,
                on_failed=on_failed,
            ),
            request.receive,  # the form was read whole: a disconnect is all that is left to receive
        )
    finally:
        SLOTS.release(key)
    if result is None:
        return Response(status_code=204)  # the browser has gone: nobody reads this
    return again(outcome=outcome_view(result, test, listed, shown_count.omitted))


def _event(kind: str, data: Mapping[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(json.dumps(data, ensure_ascii=False), event=kind, sep="\n")


async def _stream(
    test: ToolTest,
    arguments: dict[str, Any],
    allowed: tuple[IPNetwork, ...],
    limits: Limits,
    slots: RunSlots,
    key: str,
    caller: str,
    on_failed: Callable[[dict[str, Any]], None] | None = None,
) -> AsyncIterator[ServerSentEvent]:
    """The events of one test call; closing the stream (the client went away) cancels the call."""
    try:
        slots.acquire(key)
    except TooManyRuns as exc:
        yield _event("failed", {"message": exc.detail})
        return
    try:
        queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()  # at most MAX_SHOWN + 1 items
        counter = _Shown()

        async def forward(notification: dict[str, Any]) -> None:
            if counter.take():
                queue.put_nowait(("notification", {"t": counter.seconds(), "notification": notification}))

        async def run() -> None:
            try:
                result = await run_tool_test(
                    test,
                    arguments,
                    allowed_networks=allowed,
                    limits=limits,
                    on_notification=forward,
                    caller=caller,
                    on_failed=on_failed,
                )
            except Exception:  # a bug, not a tool failure (those are isError results)
                log.exception("test call of tool %s failed", test.name)
                queue.put_nowait(("failed", {"message": "The test call failed unexpectedly (see the server's log)."}))
                return
            queue.put_nowait(("result", {"t": counter.seconds(), "result": result, "omitted": counter.omitted}))

        yield _event("started", {"name": test.name, "version": test.version, "label": test.label})
        task = asyncio.ensure_future(run())
        try:
            while True:
                kind, data = await queue.get()
                yield _event(kind, data)
                if kind != "notification":
                    break
        finally:
            if not task.done():
                task.cancel()
                _finishing.add(task)
                task.add_done_callback(_finishing.discard)
    finally:
        slots.release(key)


__all__ = ["RunSlots", "TooManyRuns", "describe_content", "describe_notification", "router"]
