"""Per-label, in-memory views of the catalog: what agents are served, with templates compiled.

Agents call ``prompts/get`` far more often than admins edit, so serving never touches SQL: a
snapshot is built once per label (in a worker thread), kept until the change log says that
label's view changed, then rebuilt on next use (while the database is unreachable the last
good one keeps being served). A generation counter makes sure a build that raced with a change
is not kept.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from jsonschema.protocols import Validator

from registry.catalog.rendering import PromptRenderer, ResourceRenderer
from registry.catalog.schemas import safe_validator
from registry.catalog.service import PRODUCTION, CatalogService
from registry.catalog.specs import PromptSpec, ResourceSpec, ToolSpec
from registry.db.engine import describe, is_unavailable
from registry.webhooks import WebhookTarget

log = logging.getLogger("registry.mcp")


@dataclass(slots=True)
class PromptEntry:
    spec: PromptSpec
    renderer: PromptRenderer
    listing: dict[str, Any]


@dataclass(slots=True)
class ResourceEntry:
    spec: ResourceSpec
    renderer: ResourceRenderer
    listing: dict[str, Any]


@dataclass(slots=True)
class ToolEntry:
    spec: ToolSpec
    listing: dict[str, Any]
    input_validator: Validator
    output_validator: Validator | None
    target: WebhookTarget


def _prompt_listing(spec: PromptSpec) -> dict[str, Any]:
    item: dict[str, Any] = {"name": spec.name}
    if spec.title:
        item["title"] = spec.title
    if spec.description:
        item["description"] = spec.description
    arguments = []
    for arg in spec.arguments:
        entry: dict[str, Any] = {"name": arg.name}
        if arg.title:
            entry["title"] = arg.title
        if arg.description:
            entry["description"] = arg.description
        entry["required"] = arg.required
        arguments.append(entry)
    item["arguments"] = arguments
    return item


def _resource_listing(spec: ResourceSpec) -> dict[str, Any]:
    item: dict[str, Any] = {"name": spec.name}
    if spec.uriTemplate:
        item["uriTemplate"] = spec.uriTemplate
    else:
        item["uri"] = spec.uri
    for key in ("title", "description", "mimeType", "annotations"):
        value = getattr(spec, key)
        if value:
            item[key] = value
    return item


def _tool_listing(spec: ToolSpec) -> dict[str, Any]:
    item: dict[str, Any] = {"name": spec.name}
    if spec.title:
        item["title"] = spec.title
    item["description"] = spec.description or spec.title or spec.name
    item["inputSchema"] = spec.inputSchema
    if spec.outputSchema:
        item["outputSchema"] = spec.outputSchema
    if spec.annotations:
        item["annotations"] = spec.annotations.model_dump(exclude_none=True)
    return item


@dataclass
class CatalogSnapshot:
    label: str
    prompts: dict[str, PromptEntry] = field(default_factory=dict)
    resources: dict[str, ResourceEntry] = field(default_factory=dict)
    templates: list[ResourceEntry] = field(default_factory=list)
    tools: dict[str, ToolEntry] = field(default_factory=dict)
    prompt_list: list[dict[str, Any]] = field(default_factory=list)
    resource_list: list[dict[str, Any]] = field(default_factory=list)
    template_list: list[dict[str, Any]] = field(default_factory=list)
    tool_list: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def build(cls, catalog: CatalogService, label: str) -> CatalogSnapshot:
        snapshot = cls(label)
        for kind, name, version, stored in catalog.served_entries(label):
            try:
                snapshot._add(catalog, kind, stored)
            except Exception:  # one broken row must not take the whole catalog down
                log.exception("skipping %s %s v%s for label %s: it cannot be served", kind, name, version, label)
        snapshot.prompt_list = [p.listing for p in snapshot.prompts.values()]
        snapshot.resource_list = [r.listing for r in snapshot.resources.values()]
        snapshot.template_list = [t.listing for t in snapshot.templates]
        snapshot.tool_list = [t.listing for t in snapshot.tools.values()]
        return snapshot

    def _add(self, catalog: CatalogService, kind: str, stored: dict[str, Any]) -> None:
        if kind == "prompt":
            prompt = PromptSpec.model_validate(stored)
            self.prompts[prompt.name] = PromptEntry(prompt, PromptRenderer(prompt), _prompt_listing(prompt))
        elif kind == "resource":
            resource = ResourceSpec.model_validate(stored)
            entry = ResourceEntry(resource, ResourceRenderer(resource), _resource_listing(resource))
            if resource.kind == "template":
                self.templates.append(entry)
            else:
                self.resources[resource.identity_uri] = entry
        elif kind == "tool":
            revealed = catalog.reveal("tool", stored)
            tool = ToolSpec.model_validate(revealed)
            hook = tool.webhook
            target = WebhookTarget(
                url=hook.url,
                method=hook.method,
                headers=dict(hook.headers),
                timeout_s=hook.timeout_s,
                secret=hook.secret,
            )
            self.tools[tool.name] = ToolEntry(
                spec=tool,
                listing=_tool_listing(ToolSpec.model_validate(stored)),
                input_validator=safe_validator(tool.inputSchema, catalog.limits),
                output_validator=safe_validator(tool.outputSchema, catalog.limits) if tool.outputSchema else None,
                target=target,
            )

    def find_resource(self, uri: str) -> ResourceEntry | None:
        exact = self.resources.get(uri)
        if exact is not None:
            return exact
        for template in self.templates:
            if template.renderer.match(uri) is not None:
                return template
        return None

    def read_static(self, uri: str) -> list[dict[str, Any]] | None:
        """Contents of a static or template resource (used to embed resources in prompts)."""
        entry = self.find_resource(uri)
        if entry is None or entry.spec.kind == "http":
            return None
        return entry.renderer.read(uri)


class SnapshotCache:
    """The served snapshot of each label, rebuilt after a change.

    A change marks a label's snapshot stale rather than dropping it: the next request rebuilds it
    (and waits for that, so an edit is served right away), but if the rebuild fails (the database
    is unreachable) the stale snapshot keeps being served: agents get the catalog as it was a
    moment ago instead of an error for the whole outage. After a failure, requests are served the
    stale snapshot without waiting until a back-off has passed; then the next one tries again.
    """

    #: Back-off between rebuild attempts of a label whose last rebuild failed (doubling). Short: an
    #: attempt on a stopped database fails at once, a frozen one is cut short by the Database's own
    #: check, and once the database is back the stale snapshot is replaced within this long.
    RETRY_MIN_S = 0.25
    RETRY_MAX_S = 1.0

    def __init__(self, catalog: CatalogService) -> None:
        self.catalog = catalog
        self._snapshots: dict[str, CatalogSnapshot] = {}
        #: The last good snapshot of a label whose view changed since (served while rebuilding fails).
        self._stale: dict[str, CatalogSnapshot] = {}
        #: label -> (monotonic time before which no rebuild is tried, current back-off).
        self._retry: dict[str, tuple[float, float]] = {}
        self._generations: dict[str, int] = {}
        self._all_generation = 0
        self._state_lock = threading.Lock()
        self._build_locks: dict[str, asyncio.Lock] = {}
        self._warming: set[asyncio.Task[CatalogSnapshot]] = set()
        #: Labels a snapshot was ever built for: the ones worth rebuilding after a change.
        self._served: set[str] = {PRODUCTION}

    def _generation(self, label: str) -> tuple[int, int]:
        return self._all_generation, self._generations.get(label, 0)

    def _mark_stale(self, label: str) -> bool:
        snapshot = self._snapshots.pop(label, None)
        if snapshot is None:
            return False
        self._stale[label] = snapshot
        return True

    def invalidate(self, labels: Iterable[str] | None = None) -> list[str]:
        """Mark the snapshots of ``labels`` (all when None) stale; returns the labels that had a
        current one. Safe to call from any thread."""
        with self._state_lock:
            if labels is None:
                self._all_generation += 1
                return [label for label in list(self._snapshots) if self._mark_stale(label)]
            dropped = []
            for label in labels:
                self._generations[label] = self._generations.get(label, 0) + 1
                if self._mark_stale(label):
                    dropped.append(label)
            return dropped

    def warm(self, labels: Iterable[str]) -> None:
        """Rebuild the snapshots of these labels that agents use, in the background, so the next
        request does not wait for it."""
        for label in set(labels) & self._served:
            if label in self._snapshots:
                continue
            task = asyncio.get_running_loop().create_task(self.get(label))
            self._warming.add(task)
            task.add_done_callback(self._warmed)

    def _warmed(self, task: asyncio.Task[CatalogSnapshot]) -> None:
        self._warming.discard(task)
        if not task.cancelled() and task.exception() is not None:  # retrieved: never "never retrieved"
            log.warning("could not rebuild a catalog snapshot in the background: %s", task.exception())

    def peek(self, label: str) -> CatalogSnapshot | None:
        return self._snapshots.get(label)

    def _stale_while_backing_off(self, label: str) -> CatalogSnapshot | None:
        stale = self._stale.get(label)
        if stale is not None and time.monotonic() < self._retry.get(label, (0.0, 0.0))[0]:
            return stale
        return None

    def _rebuild_failed(self, label: str, exc: Exception) -> None:
        previous = self._retry.get(label)
        delay = self.RETRY_MIN_S if previous is None else min(previous[1] * 2, self.RETRY_MAX_S)
        self._retry[label] = (time.monotonic() + delay, delay)
        if previous is None:  # once per outage, not once per attempt
            log.warning(
                "serving the last good catalog snapshot of label %r: rebuilding it failed (%s)",
                label,
                describe(exc) if is_unavailable(exc) else exc,
                exc_info=None if is_unavailable(exc) else exc,  # not the database: a fault to look into
            )

    async def get(self, label: str) -> CatalogSnapshot:
        snapshot = self._snapshots.get(label) or self._stale_while_backing_off(label)
        if snapshot is not None:
            return snapshot
        lock = self._build_locks.setdefault(label, asyncio.Lock())
        async with lock:
            while True:
                snapshot = self._snapshots.get(label) or self._stale_while_backing_off(label)
                if snapshot is not None:
                    return snapshot
                with self._state_lock:
                    generation = self._generation(label)
                    stale = self._stale.get(label)
                try:
                    built = await asyncio.to_thread(CatalogSnapshot.build, self.catalog, label)
                except Exception as exc:
                    if stale is None:
                        raise  # nothing to fall back on: the caller answers the error
                    self._rebuild_failed(label, exc)
                    return stale
                with self._state_lock:
                    if self._generation(label) == generation:
                        self._snapshots[label] = built
                        self._stale.pop(label, None)
                        if self._retry.pop(label, None) is not None:
                            log.warning("catalog snapshot of label %r rebuilt: serving current content again", label)
                        self._served.add(label)
                        return built
                # A change landed while building: build again so it is not missed.
