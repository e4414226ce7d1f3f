"""Unsaved definitions: every problem a draft has, a prompt draft rendered, and re-applying one
person's edits on top of another's save.

The web UI's editors ask these questions while someone types, before anything is saved. The
answers come from the same code that a save and ``prompts/get`` use (the spec models, the template
checks, the renderer), so what the editor says is what a save or an agent would meet; only the
collection differs: a save stops at the first problem, a draft lists them all, each with where it
is (and the template line when there is one).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select

from registry.catalog.access import Access
from registry.catalog.errors import CatalogError, Invalid
from registry.catalog.listing import tool_listing
from registry.catalog.rendering import ArgumentError, PromptRenderer, ResourceRenderer, check_resource_templates
from registry.catalog.service import CatalogService
from registry.catalog.specs import ARGUMENT_PATTERN, SPEC_MODELS, PromptSpec, ResourceSpec, dump_spec
from registry.catalog.templates import TemplateError, check_template
from registry.catalog.validation import validation_errors
from registry.db.models import Entry, EntryVersion
from registry.limits import LimitExceeded, Limits
from registry.webhooks import (
    HttpResourceCache,
    IPNetwork,
    OutboundResponse,
    ResourceFetchError,
    caller_key,
    make_guarded_client,
)

_LINE = re.compile(r"line (\d+): (.*)", re.DOTALL)
_ARGUMENT_NAME = re.compile(ARGUMENT_PATTERN)
#: Most problems listed for one draft (a pasted megabyte of nonsense must not list thousands).
MAX_ISSUES = 50
#: The name a draft without one is previewed under.
UNNAMED = "untitled"


@dataclass(frozen=True)
class DraftIssue:
    #: Which part: ``name``, ``arguments.1.name``, ``messages.0.content.text``, ...
    where: str
    message: str
    #: The template line, for template problems.
    line: int | None = None


class DraftService:
    """The answers the editors need about a draft, from the catalog's own validation, sealing
    and rendering (``catalog``); ``allowed_networks`` are where a fetched ``http`` draft may go
    (``REGISTRY_WEBHOOK_ALLOWED_NETWORKS``, as for agents)."""

    def __init__(self, catalog: CatalogService, *, allowed_networks: Iterable[IPNetwork] = ()) -> None:
        self.catalog = catalog
        self.limits = catalog.limits
        self.allowed_networks = tuple(allowed_networks)

    def issues(self, kind: str, raw: Mapping[str, Any]) -> list[DraftIssue]:
        """Every problem that would stop ``raw`` from being saved as a ``kind`` (empty: it saves)."""
        issues: list[DraftIssue] = []
        spec = None
        try:
            spec = SPEC_MODELS[kind].model_validate(dict(raw), context={"limits": self.limits})
        except ValidationError as exc:
            issues.extend(DraftIssue(e["loc"] or kind, e["msg"]) for e in validation_errors(exc))
        if kind == "prompt":
            issues.extend(self._prompt_template_issues(raw))
        elif isinstance(spec, ResourceSpec):
            try:
                check_resource_templates(spec, limits=self.limits)
            except TemplateError as exc:
                issues.append(_template_issue("text", str(exc)))
        if spec is not None and not issues:
            try:
                self.catalog.parse_spec(kind, raw)  # what a save adds: the outbound-URL guard
            except CatalogError as exc:
                issues.append(DraftIssue(kind, exc.detail))
        return issues[:MAX_ISSUES]

    def _prompt_template_issues(self, raw: Mapping[str, Any]) -> list[DraftIssue]:
        """Each text message checked on its own, so that every broken one is listed with its line."""
        arguments = raw.get("arguments")
        declared = [
            a["name"]
            for a in (arguments if isinstance(arguments, list) else [])
            if isinstance(a, dict) and isinstance(a.get("name"), str) and _ARGUMENT_NAME.fullmatch(a["name"])
        ]
        messages = raw.get("messages")
        issues = []
        for index, message in enumerate(messages if isinstance(messages, list) else []):
            content = message.get("content") if isinstance(message, dict) else None
            text = content.get("text") if isinstance(content, dict) and content.get("type") == "text" else None
            if not isinstance(text, str):
                continue
            where = f"messages.{index}.content.text"
            try:
                check_template(text, declared, where=where, limits=self.limits)
            except TemplateError as exc:
                issues.append(_template_issue(where, str(exc)))
        return issues

    def preview_prompt(
        self,
        raw: Mapping[str, Any],
        arguments: Mapping[str, Any],
        *,
        label: str = "production",
        access: Access | None = None,
    ) -> dict[str, Any]:
        """The ``GetPromptResult`` an agent would get for this draft with these arguments (embedded
        resources resolved as ``label`` serves them, among those ``access`` sees). ``Invalid`` when the
        draft or the arguments are not acceptable; run it off the event loop (it renders, within the
        render budget)."""
        spec = self.catalog.parse_spec("prompt", _named(raw))
        assert isinstance(spec, PromptSpec)
        try:
            return PromptRenderer(spec).render(
                arguments, lambda uri: self.catalog.read_resource(uri, label=label, access=access), limits=self.limits
            )
        except (ArgumentError, TemplateError) as exc:
            raise Invalid(str(exc)) from None

    # ------------------------------------------------------------------ resource drafts

    def resource_template_issues(self, raw: Mapping[str, Any]) -> list[DraftIssue]:
        """The template problems of a ``template`` resource draft, found even while other fields do
        not validate yet (``issues`` reaches the templates only once the rest of the draft is
        valid): the same check, so the same issue as ``issues`` reports once it gets there."""
        template, text = raw.get("uriTemplate"), raw.get("text")
        limits = self.limits
        if raw.get("kind") != "template" or not isinstance(template, str) or not template or not isinstance(text, str):
            return []
        if len(template) > limits.uri_chars or len(text) > limits.template_chars:
            return []  # the spec's own size checks name these
        try:
            check_resource_templates(
                ResourceSpec.model_construct(kind="template", uriTemplate=template, text=text), limits=limits
            )
        except TemplateError as exc:
            return [_template_issue("text", str(exc))]
        return []

    def _resource_draft(self, raw: Mapping[str, Any]) -> ResourceSpec:
        spec = self.catalog.parse_spec("resource", _named(raw))
        assert isinstance(spec, ResourceSpec)
        return spec

    def preview_resource(self, raw: Mapping[str, Any], uri: str) -> list[dict[str, Any]]:
        """The ``contents`` that ``resources/read`` returns for ``uri`` from this static or template
        draft: the same renderer, URI bound and render budget as MCP. ``Invalid`` when the draft does
        not save, the URI matches nothing, or the template fails; run it off the event loop (it renders)."""
        cap = self.limits.uri_chars
        if len(uri) > cap:
            raise Invalid(str(LimitExceeded("uri_chars", f"the URI has {len(uri)} characters; at most {cap}")))
        spec = self._resource_draft(raw)
        if spec.kind == "http":
            raise Invalid("an http resource's content comes from its URL: fetch it to see it")
        try:
            contents = ResourceRenderer(spec).read(uri, limits=self.limits)
        except TemplateError as exc:
            raise Invalid(f"resource {uri} could not be rendered: {exc}") from None
        if contents is None:
            pattern = f"the URI template {spec.uriTemplate}" if spec.uriTemplate else f"this resource's URI {spec.uri}"
            raise Invalid(f"resource not found: {uri} does not match {pattern}")
        return contents

    def fetch_resource(
        self, raw: Mapping[str, Any], *, editing: str | None, access: Access | None = None, caller: str | None = None
    ) -> FetchedResource:
        """Fetch this ``http`` draft once, as ``resources/read`` would: the same fetcher
        (``HttpResourceCache``: SSRF-guarded client, no redirects, ``http_resource_bytes`` and
        ``http_resource_seconds``, the outbound caps), with the headers a save would store. A masked header
        (``********``) is the stored value of ``editing``'s newest version, kept under the rule a save
        applies (``CatalogService.seal``: only while the URL keeps its origin), so a preview cannot
        send stored credentials anywhere a save could not. Never cached: a preview always fetches.

        Blocking: it reads the database, then runs the fetch on an event loop of its own
        (``asyncio.run``). Call it from a worker thread, never on the event loop. Why not an async
        path: the editor's checks are synchronous (``EntryForm.check`` runs in a worker thread), the
        fetch happens only when someone presses "Fetch now", and it is over within
        ``http_resource_seconds``; a private loop keeps that thread's work in one place and the
        fetcher exactly the one agents are served by.

        ``caller`` (``registry.webhooks.caller_key``) is whose fetch it is, for the per-caller outbound
        cap; by default the token or single-sign-on user of ``access`` (a ``Principal``).
        """
        spec = self._resource_draft(raw)
        if spec.kind != "http":
            raise Invalid(f"a {spec.kind} resource is not fetched; only http resources are")
        sealed = self.catalog.seal("resource", dump_spec(spec), self._stored("resource", editing, access))
        revealed = ResourceSpec.model_validate(self.catalog.reveal("resource", sealed))
        if caller is None and access is not None:
            caller = caller_key(getattr(access, "token_id", None), getattr(access, "user", None))
        return asyncio.run(_fetch_now(revealed, self.limits, self.allowed_networks, caller))

    # ------------------------------------------------------------------ tool drafts

    def preview_tool(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The item ``tools/list`` would show for this tool draft (``registry.catalog.listing``: its
        webhook, with the write-only values, is never part of it). ``Invalid`` when the draft does not
        validate. The outbound-URL guard is not consulted: the URL is not part of the listing."""
        try:
            spec = SPEC_MODELS["tool"].model_validate(_named(raw), context={"limits": self.limits})
        except ValidationError as exc:
            raise Invalid("invalid tool", errors=validation_errors(exc)) from None
        return tool_listing(dump_spec(spec))

    def kept_value_issues(
        self, kind: str, raw: Mapping[str, Any], editing: str | None, access: Access | None = None
    ) -> list[DraftIssue]:
        """What a save would say of the draft's masked write-only values (``********``: "keep the
        stored one"): that there is no stored value to keep, or that the URL moved to another origin so
        they must be typed again (``CatalogService.seal``, the rule a save applies, against the newest
        stored version of ``editing``). Empty when the draft does not validate: ``issues`` speaks."""
        try:
            spec = SPEC_MODELS[kind].model_validate(dict(raw), context={"limits": self.limits})
        except ValidationError:
            return []
        try:
            self.catalog.seal(kind, dump_spec(spec), self._stored(kind, editing, access))
        except CatalogError as exc:
            return [DraftIssue("webhook" if kind == "tool" else "headers", exc.detail)]
        return []

    def latest_stored(
        self, kind: str, name: str, *, access: Access | None = None
    ) -> tuple[Entry, dict[str, Any]] | None:
        """The entry and its newest stored definition (write-only values sealed); None when there
        is no such entry, or ``access`` may not edit it (its stored values are not for them)."""
        with self.catalog.db.session() as session:
            entry = session.scalar(select(Entry).where(Entry.kind == kind, Entry.name == name))
            if entry is None or (access is not None and not access.may("editor", entry.team)):
                return None
            newest = select(EntryVersion.spec).where(
                EntryVersion.entry_id == entry.id, EntryVersion.number == entry.latest_version
            )
            return entry, session.scalars(newest).one()

    def _stored(self, kind: str, editing: str | None, access: Access | None) -> dict[str, Any] | None:
        """The newest stored definition of the entry being edited (what masked values keep)."""
        found = self.latest_stored(kind, editing, access=access) if editing else None
        return found[1] if found is not None else None


def _named(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The draft, under ``UNNAMED`` while it has no name yet (a preview needs one)."""
    draft = dict(raw)
    if not draft.get("name"):
        draft["name"] = UNNAMED
    return draft


def _template_issue(where: str, text: str) -> DraftIssue:
    text = text.removeprefix(f"{where}: ")
    found = _LINE.fullmatch(text)
    if found:
        return DraftIssue(where, found.group(2), int(found.group(1)))
    return DraftIssue(where, text)


@dataclass(frozen=True)
class FetchedResource:
    """What fetching an ``http`` draft now gave: the contents ``resources/read`` would return, or
    why there are none (the message an agent would get)."""

    contents: list[dict[str, Any]] | None
    #: The upstream's answer (``200 OK``), when one came.
    status: str | None
    error: str | None
    seconds: float


async def _fetch_now(
    spec: ResourceSpec, limits: Limits, allowed: tuple[IPNetwork, ...], caller: str | None
) -> FetchedResource:
    answers: list[str] = []

    def heard(response: OutboundResponse) -> None:
        answers.append(f"{response.status_code} {response.reason_phrase}".strip())

    started = time.perf_counter()
    async with make_guarded_client(allowed, timeout=limits.http_resource_seconds, limits=limits) as client:
        client.on_response = heard
        fetcher = HttpResourceCache(lambda: client, limits)  # headers are already revealed
        try:
            contents = await fetcher.read(spec.uri or "", spec, caller=caller)
        except ResourceFetchError as exc:
            return FetchedResource(None, answers[-1] if answers else None, str(exc), time.perf_counter() - started)
    return FetchedResource(contents, answers[-1] if answers else None, None, time.perf_counter() - started)


# ---------------------------------------------------------------------- re-applying edits

_MISSING = object()


@dataclass
class Reapplied:
    """``mine`` re-applied on top of ``theirs`` (both edits of ``base``)."""

    merged: dict[str, Any]
    #: Fields only I changed: my value is in ``merged``.
    mine: list[str]
    #: Fields only they changed: their value is in ``merged``.
    theirs: list[str]
    #: Fields we both changed, differently: my value is in ``merged`` (theirs is in their diff).
    both: list[str]


def reapply(base: Mapping[str, Any], theirs: Mapping[str, Any], mine: Mapping[str, Any]) -> Reapplied:
    """A field-by-field three-way merge: what I changed since ``base`` goes on top of their
    version; what they changed and I did not stays theirs. Messages are merged one by one when
    neither side added or removed any, so two people editing different messages both keep theirs."""
    result = Reapplied({}, [], [], [])
    for key in sorted(set(base) | set(theirs) | set(mine), key=_field_order(theirs, mine)):
        old, their, my = base.get(key, _MISSING), theirs.get(key, _MISSING), mine.get(key, _MISSING)
        if my == old:
            value = their
            if their != old:
                result.theirs.append(key)
        elif their in (old, my):
            value = my
            if their != my:
                result.mine.append(key)
        elif key == "messages" and _same_length_lists(old, their, my):
            value, clashes = _merge_items(old, their, my)
            result.both.extend(f"messages.{index}" for index in clashes)
            if not clashes:
                result.mine.append(key)
        else:
            value = my
            result.both.append(key)
        if value is not _MISSING:
            result.merged[key] = value
    return result


def _merge_items(old: list[Any], their: list[Any], my: list[Any]) -> tuple[list[Any], list[int]]:
    """Item by item: mine where only I changed it (or we both did: then it is a clash)."""
    merged, clashes = [], []
    for index, (o, t, m) in enumerate(zip(old, their, my, strict=True)):
        if m == o:
            merged.append(t)
        else:
            merged.append(m)
            if t not in (o, m):
                clashes.append(index)
    return merged, clashes


def _same_length_lists(*values: Any) -> bool:
    return all(isinstance(v, list) for v in values) and len({len(v) for v in values}) == 1


def _field_order(*specs: Mapping[str, Any]) -> Any:
    order: dict[str, int] = {}
    for spec in specs:
        for key in spec:
            order.setdefault(key, len(order))
    return lambda key: order.get(key, len(order))
