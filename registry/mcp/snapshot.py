"""Per-label, in-memory views of the catalog: what agents are served, kept current change by change.

Agents call ``prompts/get`` far more often than admins edit, so serving never touches SQL: each
label agents use has a ``CatalogSnapshot``, built once in a worker thread (at start-up, or the
first time an agent asks for that label), then kept current by applying the change log to it,
in slices of a few hundred changes (``SnapshotCache.APPLY_SLICE``): for each slice, one query
reads the changed entries' served versions (``served_rows_of``) and the new list orders are
merged, in a worker thread, then one synchronous step on the event loop swaps them in, and the
loop takes a turn before the next slice. An edit costs the entries it touches, not the size of
the catalog; a request never waits for it and never sees half a change (a swap has no ``await``
in it; list orders are replaced, not edited in place), and a 1,000-change batch never holds the
loop (or the worker thread the interpreter) for more than one slice's worth of work. A full
rebuild happens only at start-up, for a new label, or when applying failed for a reason other
than the database (a gap): it runs in the background while the current snapshot keeps serving.
While the database is unreachable the feed retries the batch and the last good snapshot serves.

Memory at 100,000 entries: an entry keeps its stored definition as JSON text and its list item,
nothing more. The parsed model, compiled templates, decrypted webhook and JSON Schema validators
are built on first use and kept for the most recently used entries only (``Materialized``).
Entries are shared between labels serving the same version.

Teams: each entry carries its team (None: global). A client sees global entries and those of its
``visible_teams`` (None: every team, an admin); an entry it does not see answers exactly like a
missing one. Besides each list's sorted keys, a snapshot keeps them split by team
(``team_keys``, and ``global_keys`` for the global ones); a filtered page merges the global keys
with the visible teams' (a bisect and a slice each), so it costs the page, not the catalog, and
needs no cache to invalidate. While a list holds no team entries (the common case), ``global_keys``
*is* ``keys`` and every client is served the unfiltered list exactly as before.
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import heapq
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import orjson
from jsonschema.protocols import Validator

from registry.boundedjson import exact_dumps, exact_loads
from registry.catalog.listing import listing
from registry.catalog.rendering import PromptRenderer, ResourceRenderer
from registry.catalog.schemas import safe_validator
from registry.catalog.service import CatalogService
from registry.catalog.specs import PromptSpec, ResourceSpec, ToolSpec
from registry.catalog.uritemplates import UriTemplate
from registry.db.engine import describe, is_unavailable
from registry.mcp.notifier import ChangeEvent
from registry.mcp.protocol import INTERNAL_ERROR, JsonRpcError
from registry.webhooks import WebhookTarget

log = logging.getLogger("registry.mcp")

T = TypeVar("T")

#: What a client sees besides global entries: team names; None: every team (an admin).
Visible = frozenset[str] | None


def sees(visible: Visible, team: str | None) -> bool:
    """Whether a client seeing ``visible`` teams sees an entry of ``team`` (None: global)."""
    return team is None or visible is None or team in visible


@dataclass(frozen=True, slots=True)
class ServedTool:
    """A tool ready to call: its definition with write-only values decrypted, and its validators."""

    spec: ToolSpec
    input_validator: Validator
    output_validator: Validator | None
    target: WebhookTarget


class Materialized:
    """Parsed, compiled forms of stored definitions, built on first use; the most recently used
    ``size`` are kept (keyed by kind and stored text, so labels serving one version share them).

    Thread-safe: renders run in worker threads. Building happens outside the lock; two threads
    building the same entry at once both get a correct result.
    """

    def __init__(self, catalog: CatalogService, size: int) -> None:
        self.catalog = catalog
        self.size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[str, str], Any] = OrderedDict()

    def get(self, kind: str, name: str, source: str, build: Callable[[str], T]) -> T:
        key = (kind, source)
        # A hit takes no lock (every request has one): each OrderedDict call is atomic under the
        # GIL, and a key another thread evicts meanwhile just is not moved.
        found = self._items.get(key)
        if found is not None:
            try:  # noqa: SIM105 - contextlib.suppress costs more than the lookup it guards
                self._items.move_to_end(key)
            except KeyError:
                pass
            return found
        try:
            value = build(source)
        except Exception as exc:
            # Accepted when saved, refused now (a stored document from an older version, say):
            # this entry fails with a reason, the rest of the catalog is served.
            log.warning("%s %s cannot be served: %s", kind, name, exc)
            raise JsonRpcError(
                INTERNAL_ERROR, f"{kind} {name} cannot be served: its stored definition is invalid"
            ) from None
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value

    def prompt(self, name: str, source: str) -> tuple[PromptSpec, PromptRenderer]:
        return self.get("prompt", name, source, _build_prompt)

    def resource(self, name: str, source: str) -> tuple[ResourceSpec, ResourceRenderer]:
        return self.get("resource", name, source, _build_resource)

    def tool(self, name: str, source: str) -> ServedTool:
        return self.get("tool", name, source, self._build_tool)

    def _build_tool(self, source: str) -> ServedTool:
        revealed = self.catalog.reveal("tool", exact_loads(source))
        tool = ToolSpec.model_validate(revealed)
        hook = tool.webhook
        limits = self.catalog.limits
        return ServedTool(
            spec=tool,
            input_validator=safe_validator(tool.inputSchema, limits),
            output_validator=safe_validator(tool.outputSchema, limits) if tool.outputSchema else None,
            target=WebhookTarget(
                url=hook.url,
                method=hook.method,
                headers=dict(hook.headers),
                timeout_s=hook.timeout_s,
                secret=hook.secret,
            ),
        )


def _build_prompt(source: str) -> tuple[PromptSpec, PromptRenderer]:
    spec = PromptSpec.model_validate(exact_loads(source))
    return spec, PromptRenderer(spec)


def _build_resource(source: str) -> tuple[ResourceSpec, ResourceRenderer]:
    spec = ResourceSpec.model_validate(exact_loads(source))
    return spec, ResourceRenderer(spec)


class ServedEntry:
    """One entry as a label serves it: the stored definition as JSON text, and its list item.
    Immutable once built (a change replaces the object), so labels serving the same version share it."""

    __slots__ = ("_encoded", "_lazy", "listing", "name", "source", "team", "version")
    kind: ClassVar[str] = ""

    def __init__(
        self, name: str, version: int, source: str, item: dict[str, Any], lazy: Materialized, team: str | None = None
    ) -> None:
        self.name = name
        self.version = version
        self.source = source
        self.listing = item
        self._lazy = lazy
        #: Who sees it over MCP: that team's members and admins; None: everyone (a global entry).
        self.team = team
        self._encoded: orjson.Fragment | None = None

    @property
    def encoded_listing(self) -> orjson.Fragment:
        """The list item as JSON, encoded on first use and then spliced into every list answer
        as is (a tools/list page is mostly re-encoding the same schemas otherwise)."""
        encoded = self._encoded
        if encoded is None:
            encoded = self._encoded = orjson.Fragment(exact_dumps(self.listing))
        return encoded

    def same_as(self, version: int, source: str, team: str | None = None) -> bool:
        """Serves the same thing to the same clients (a move to another team is a change too)."""
        return self.version == version and self.source == source and self.team == team


class PromptEntry(ServedEntry):
    __slots__ = ()
    kind = "prompt"

    @property
    def spec(self) -> PromptSpec:
        return self._lazy.prompt(self.name, self.source)[0]

    @property
    def renderer(self) -> PromptRenderer:
        return self._lazy.prompt(self.name, self.source)[1]


class ResourceEntry(ServedEntry):
    __slots__ = ("matcher", "resource_kind", "uri")
    kind = "resource"

    def __init__(
        self,
        name: str,
        version: int,
        source: str,
        item: dict[str, Any],
        lazy: Materialized,
        stored: Mapping[str, Any],
        team: str | None = None,
    ) -> None:
        super().__init__(name, version, source, item, lazy, team)
        #: What must be unique: the URI, or the URI template of a template resource.
        self.uri: str = stored.get("uri") or stored.get("uriTemplate") or ""
        self.resource_kind: str = stored.get("kind", "static")
        #: Template resources: the URI template, compiled now (every read may try to match it).
        self.matcher = UriTemplate(self.uri) if self.resource_kind == "template" else None

    def match(self, uri: str) -> dict[str, str] | None:
        if self.matcher is not None:
            return self.matcher.match(uri)
        return {} if uri == self.uri else None

    @property
    def spec(self) -> ResourceSpec:
        return self._lazy.resource(self.name, self.source)[0]

    @property
    def renderer(self) -> ResourceRenderer:
        return self._lazy.resource(self.name, self.source)[1]


class ToolEntry(ServedEntry):
    __slots__ = ()
    kind = "tool"

    @property
    def served(self) -> ServedTool:
        return self._lazy.tool(self.name, self.source)

    @property
    def spec(self) -> ToolSpec:
        return self.served.spec

    @property
    def input_validator(self) -> Validator:
        return self.served.input_validator

    @property
    def output_validator(self) -> Validator | None:
        return self.served.output_validator

    @property
    def target(self) -> WebhookTarget:
        return self.served.target


def make_entry(
    kind: str, name: str, version: int, source: str, lazy: Materialized, team: str | None = None
) -> ServedEntry:
    """Parse the stored text once, keep its list item (whose strings are the only ones kept)."""
    stored = exact_loads(source)
    if not isinstance(stored, dict) or stored.get("name") != name:
        raise ValueError("the stored definition does not name this entry")
    item = listing(kind, stored)
    if kind == "prompt":
        return PromptEntry(name, version, source, item, lazy, team)
    if kind == "resource":
        return ResourceEntry(name, version, source, item, lazy, stored, team)
    if kind == "tool":
        return ToolEntry(name, version, source, item, lazy, team)
    raise ValueError(f"unknown kind {kind!r}")


class UriIndex:
    """URI -> the static or http resource a label serves there.

    Two resources of one label can claim a URI (the label serves an old version of one whose URI
    another resource has taken since): the greatest name wins, and if it leaves the other is
    found again. Contested URIs alone keep their claimants, so the common case costs one dict.
    """

    __slots__ = ("contested", "winners")

    def __init__(self) -> None:
        self.winners: dict[str, ResourceEntry] = {}
        self.contested: dict[str, dict[str, ResourceEntry]] = {}

    def get(self, uri: str) -> ResourceEntry | None:
        return self.winners.get(uri)

    def find(self, uri: str, visible: Visible) -> ResourceEntry | None:
        """The resource at ``uri`` a client seeing ``visible`` teams is served: the winner, or, if
        it cannot see that one, the greatest-named claimant it can see."""
        winner = self.winners.get(uri)
        if winner is None or winner.team is None or visible is None or winner.team in visible:
            return winner
        claims = self.contested.get(uri)
        if claims is None:
            return None
        seen = [name for name, entry in claims.items() if sees(visible, entry.team)]
        return claims[max(seen)] if seen else None

    def add(self, entry: ResourceEntry) -> None:
        uri = entry.uri
        current = self.winners.get(uri)
        claims = self.contested.get(uri)
        if claims is None:
            if current is None or current.name == entry.name:
                self.winners[uri] = entry
                return
            claims = self.contested[uri] = {current.name: current}
        claims[entry.name] = entry
        self.winners[uri] = claims[max(claims)]

    def remove(self, entry: ResourceEntry) -> None:
        uri = entry.uri
        claims = self.contested.get(uri)
        if claims is None:
            current = self.winners.get(uri)
            if current is not None and current.name == entry.name:
                del self.winners[uri]
            return
        claims.pop(entry.name, None)
        if len(claims) <= 1:
            del self.contested[uri]
        if claims:
            self.winners[uri] = claims[max(claims)]
        else:
            self.winners.pop(uri, None)


#: The four MCP lists: list name -> the kind of entry it shows.
LISTS = {"prompts": "prompt", "resources": "resource", "resourceTemplates": "resource", "tools": "tool"}


@dataclass
class CatalogSnapshot:
    """What one label serves. Entries by name per kind, plus each list's keys in order.

    Mutated only by ``SnapshotCache`` on the event loop, in one synchronous step per slice of
    changes; list orders (``keys``) and ``templates`` are replaced, never edited in place, so a
    page or a template match running in a worker thread sees one state or the other.
    """

    label: str
    #: Every change up to this id is reflected (later ones may be too: applying is idempotent).
    position: int = 0
    prompts: dict[str, PromptEntry] = field(default_factory=dict)
    tools: dict[str, ToolEntry] = field(default_factory=dict)
    #: Every resource (static, http and template), by name.
    resource_entries: dict[str, ResourceEntry] = field(default_factory=dict)
    #: Static and http resources by URI.
    resources: UriIndex = field(default_factory=UriIndex)
    #: Template resources in name order (the first that matches a URI wins).
    templates: tuple[ResourceEntry, ...] = ()
    #: List name -> its entries' names, sorted: the order of the list and of its cursors.
    keys: dict[str, list[str]] = field(default_factory=lambda: {name: [] for name in LISTS})
    #: List name -> team -> the names of that team's entries in the list, sorted (teams with
    #: entries only: empty while the list holds no team entries).
    team_keys: dict[str, dict[str, list[str]]] = field(default_factory=lambda: {name: {} for name in LISTS})
    #: List name -> the names of its global entries, sorted; the very ``keys`` list while the list
    #: holds no team entries.
    global_keys: dict[str, list[str]] = field(init=False)

    def __post_init__(self) -> None:
        self.global_keys = dict(self.keys)

    # ------------------------------------------------------------------ reading
    def entries(self, kind: str) -> Mapping[str, ServedEntry]:
        if kind == "prompt":
            return self.prompts
        if kind == "tool":
            return self.tools
        return self.resource_entries

    def prompt(self, name: str, visible: Visible) -> PromptEntry | None:
        """The prompt ``name`` as a client seeing ``visible`` teams is served (None: none it sees)."""
        entry = self.prompts.get(name)
        return entry if entry is not None and sees(visible, entry.team) else None

    def tool(self, name: str, visible: Visible) -> ToolEntry | None:
        """The tool ``name`` as a client seeing ``visible`` teams is served (None: none it sees)."""
        entry = self.tools.get(name)
        return entry if entry is not None and sees(visible, entry.team) else None

    @property
    def has_team_entries(self) -> bool:
        """Whether any list holds a team's entry (else every client is shown the same)."""
        return any(self.team_keys[name] for name in LISTS)

    def _sources(self, list_name: str, visible: Visible) -> list[list[str]]:
        """The sorted key lists whose union is the list a client seeing ``visible`` teams is shown:
        the whole list (no team entries in it, an admin, or every team in it visible), else the
        global keys and each visible team's."""
        teams = self.team_keys[list_name]
        if visible is None or not teams:
            return [self.keys[list_name]]
        if len(visible) < len(teams):
            chosen = [teams[team] for team in visible if team in teams]
        else:
            chosen = [names for team, names in teams.items() if team in visible]
        if not chosen:
            return [self.global_keys[list_name]]
        if len(chosen) == len(teams):
            return [self.keys[list_name]]
        return [self.global_keys[list_name], *chosen]

    def page(
        self, list_name: str, after: str | None, size: int, visible: Visible, *, encoded: bool = False
    ) -> tuple[list[Any], str | None]:
        """Up to ``size`` list items after the key ``after`` (None: from the start), and the key to
        continue after (None: that was the last page), of the list a client seeing ``visible``
        teams is shown. Keyset, not offset: an entry added or removed before the cursor neither
        repeats nor skips one after it. ``encoded``: the items as JSON fragments (to answer with)."""
        entries = self.entries(LISTS[list_name])
        sources = self._sources(list_name, visible)
        if len(sources) == 1:
            keys = sources[0]
            start = 0 if after is None else bisect.bisect_right(keys, after)
            chosen = keys[start : start + size]
            if encoded:
                items: list[Any] = [entries[key].encoded_listing for key in chosen]
            else:
                items = [entries[key].listing for key in chosen]
            return items, (chosen[-1] if chosen and start + size < len(keys) else None)
        # Names are unique within a list, so the sources are disjoint: the next ``size`` + 1 of
        # each, merged, say which ``size`` come next and whether any follow.
        heads = []
        for keys in sources:
            start = 0 if after is None else bisect.bisect_right(keys, after)
            heads.append(keys[start : start + size + 1])
        merged = list(heapq.merge(*heads))
        chosen = merged[:size]
        if encoded:
            items = [entries[key].encoded_listing for key in chosen]
        else:
            items = [entries[key].listing for key in chosen]
        return items, (chosen[-1] if chosen and len(merged) > size else None)

    def listed(self, list_name: str, visible: Visible = None) -> list[dict[str, Any]]:
        """A whole list, in order (as a client seeing ``visible`` teams is shown it; None: all)."""
        entries = self.entries(LISTS[list_name])
        sources = self._sources(list_name, visible)
        keys = sources[0] if len(sources) == 1 else heapq.merge(*sources)
        return [entries[key].listing for key in keys]

    @property
    def prompt_list(self) -> list[dict[str, Any]]:
        return self.listed("prompts")

    @property
    def resource_list(self) -> list[dict[str, Any]]:
        return self.listed("resources")

    @property
    def template_list(self) -> list[dict[str, Any]]:
        return self.listed("resourceTemplates")

    @property
    def tool_list(self) -> list[dict[str, Any]]:
        return self.listed("tools")

    def find_resource(self, uri: str, visible: Visible) -> ResourceEntry | None:
        """The resource a client seeing ``visible`` teams reads at ``uri``: a static or http one
        there, else the first template (in name order) that matches; a team's template never
        matches for a client outside it."""
        exact = self.resources.find(uri, visible)
        if exact is not None:
            return exact
        for template in self.templates:
            team = template.team
            if (team is None or visible is None or team in visible) and template.match(uri) is not None:
                return template
        return None

    def read_static(self, uri: str, visible: Visible) -> list[dict[str, Any]] | None:
        """Contents of a static or template resource (used to embed resources in prompts), as a
        client seeing ``visible`` teams reads it."""
        entry = self.find_resource(uri, visible)
        if entry is None or entry.resource_kind == "http":
            return None
        return entry.renderer.read(uri)

    def state(self) -> dict[str, Any]:
        """Everything the snapshot serves, comparable (tests: applied changes == a fresh build)."""
        return {
            "entries": {
                kind: sorted((name, e.version, e.source) for name, e in self.entries(kind).items())
                for kind in ("prompt", "resource", "tool")
            },
            "lists": {name: self.listed(name) for name in LISTS},
            "uris": {uri: (entry.name, entry.version) for uri, entry in sorted(self.resources.winners.items())},
            "templates": [(t.name, t.version, t.source) for t in self.templates],
            "teams": {
                kind: sorted((name, e.team) for name, e in self.entries(kind).items() if e.team is not None)
                for kind in ("prompt", "resource", "tool")
            },
            "team_keys": {name: dict(sorted(self.team_keys[name].items())) for name in LISTS},
            "global_keys": self.global_keys,
        }

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls, catalog: CatalogService, label: str, lazy: Materialized | None = None, shared: SharedEntries | None = None
    ) -> CatalogSnapshot:
        """A full build from the database (in a worker thread)."""
        lazy = lazy or Materialized(catalog, SnapshotCache.MATERIALIZED)
        with _collection_paused():
            position, rows = catalog.served_rows(label)
            snapshot = cls(label, position)
            changes: dict[tuple[str, str], ServedEntry | None] = {}
            for kind, name, version, source, team in rows:
                changes[(kind, name)] = _entry_for(kind, name, version, source, team, label, lazy, shared)
            del rows
            snapshot.apply(snapshot.prepare(changes))
        return snapshot

    def prepare(self, changes: Mapping[tuple[str, str], ServedEntry | None]) -> Patch:
        """What applying ``changes`` ((kind, name) -> the entry now served, None: none) takes,
        worked out without touching the snapshot (in a worker thread; applies are serialised, so
        the snapshot cannot change meanwhile): unchanged entries dropped, new list orders built."""
        effective: dict[tuple[str, str], ServedEntry | None] = {}
        added: dict[str, set[str]] = {name: set() for name in LISTS}
        removed: dict[str, set[str]] = {name: set() for name in LISTS}
        #: The same per (list, team): where team key lists change (a move changes no list).
        team_added: dict[tuple[str, str | None], set[str]] = {}
        team_removed: dict[tuple[str, str | None], set[str]] = {}
        templates_changed = False
        for (kind, name), new in changes.items():
            old = self.entries(kind).get(name)
            if old is None and new is None:
                continue
            if old is not None and new is not None and old.same_as(new.version, new.source, new.team):
                continue
            effective[(kind, name)] = new
            old_list = _list_of(old) if old is not None else None
            new_list = _list_of(new) if new is not None else None
            if old_list != new_list:
                if old_list is not None:
                    removed[old_list].add(name)
                if new_list is not None:
                    added[new_list].add(name)
            old_slot = (old_list, old.team) if old is not None and old_list is not None else None
            new_slot = (new_list, new.team) if new is not None and new_list is not None else None
            if old_slot != new_slot:
                if old_slot is not None:
                    team_removed.setdefault(old_slot, set()).add(name)
                if new_slot is not None:
                    team_added.setdefault(new_slot, set()).add(name)
            if "resourceTemplates" in (old_list, new_list):
                templates_changed = True
        keys = {
            list_name: _merged(self.keys[list_name], added[list_name], removed[list_name])
            for list_name in LISTS
            if added[list_name] or removed[list_name]
        }
        groups: dict[str, tuple[dict[str, list[str]], list[str]]] = {}
        for list_name in {slot[0] for slot in team_added} | {slot[0] for slot in team_removed} | set(keys):
            teams = dict(self.team_keys[list_name])
            touched = {team for in_list, team in (*team_added, *team_removed) if in_list == list_name and team}
            for team in touched:
                plus, minus = team_added.get((list_name, team), set()), team_removed.get((list_name, team), set())
                names = _merged(teams.get(team, []), plus, minus)
                if names:
                    teams[team] = names
                else:
                    teams.pop(team, None)
            new_keys = keys.get(list_name, self.keys[list_name])
            if not teams:  # no team entries: the global keys are the list (shared, not copied)
                global_keys = new_keys
            else:
                plus, minus = team_added.get((list_name, None), set()), team_removed.get((list_name, None), set())
                global_keys = _merged(self.global_keys[list_name], plus, minus)
            groups[list_name] = (teams, global_keys)
        return Patch(effective, keys, templates_changed, groups)

    def apply(self, patch: Patch) -> None:
        """Swap a prepared patch in: synchronous, so a reader on the event loop sees all or nothing."""
        for (kind, name), new in patch.entries.items():
            if kind == "prompt":
                _swap(self.prompts, name, new)
            elif kind == "tool":
                _swap(self.tools, name, new)
            else:
                old = self.resource_entries.get(name)
                if old is not None and old.resource_kind != "template":
                    self.resources.remove(old)
                _swap(self.resource_entries, name, new)
                if isinstance(new, ResourceEntry) and new.resource_kind != "template":
                    self.resources.add(new)
        for list_name, keys in patch.keys.items():
            self.keys[list_name] = keys
        for list_name, (teams, global_keys) in patch.groups.items():
            self.team_keys[list_name] = teams
            self.global_keys[list_name] = global_keys
        if patch.templates_changed:
            self.templates = tuple(self.resource_entries[name] for name in self.keys["resourceTemplates"])


@dataclass
class Patch:
    """A prepared batch of changes to one snapshot (see ``CatalogSnapshot.prepare``)."""

    entries: dict[tuple[str, str], ServedEntry | None]
    keys: dict[str, list[str]]
    templates_changed: bool
    #: List name -> its new (team key lists, global keys), for the lists whose split changed.
    groups: dict[str, tuple[dict[str, list[str]], list[str]]] = field(default_factory=dict)


def _swap(entries: dict[str, Any], name: str, new: ServedEntry | None) -> None:
    if new is None:
        entries.pop(name, None)
    else:
        entries[name] = new


def _list_of(entry: ServedEntry) -> str:
    if isinstance(entry, ResourceEntry):
        return "resourceTemplates" if entry.resource_kind == "template" else "resources"
    return "prompts" if entry.kind == "prompt" else "tools"


def _merged(keys: list[str], added: set[str], removed: set[str]) -> list[str]:
    """A new sorted key list: ``keys`` without ``removed``, with ``added`` (the old one is left as
    it is for readers still using it). One binary search per edit and slice copies of the runs in
    between: O(k log n) comparisons and a memory copy, never a sort of the whole list, so a batch of
    a thousand changes to a 100,000-entry list holds the interpreter for well under a millisecond."""
    result: list[str] = []
    start = 0
    for key in sorted(added | removed):
        index = bisect.bisect_left(keys, key, start)
        result += keys[start:index]
        present = index < len(keys) and keys[index] == key
        if key in added:
            result.append(key)
        start = index + 1 if present else index
    result += keys[start:]
    return result


_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


@contextmanager
def _collection_paused() -> Iterator[None]:
    """No cyclic garbage collection while a full snapshot is built: hundreds of thousands of
    long-lived objects allocated in one go make the collector run again and again over a growing
    heap (half the time of a 100,000-entry build), and nothing built here is cyclic garbage. The
    pause is process-wide and lasts the build (about a second at 100,000 entries); nested or
    concurrent builds restore the collector once, when the last one ends."""
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


_apply_executor: ThreadPoolExecutor | None = None


def _apply_thread() -> ThreadPoolExecutor:
    """The one thread that reads changed entries for every ``SnapshotCache.apply`` (applies are
    serialised anyway). Not the loop's default executor: writers waiting for their change to be
    served (``written``) may occupy that one, and must not keep the apply they wait for from running."""
    global _apply_executor
    if _apply_executor is None:
        _apply_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot-apply")
    return _apply_executor


#: Looks up an entry another label already serves at (kind, name, version, text, team), to share it.
SharedEntries = Callable[[str, str, int, str, str | None, str], ServedEntry | None]


def _entry_for(
    kind: str,
    name: str,
    version: int,
    source: str,
    team: str | None,
    label: str,
    lazy: Materialized,
    shared: SharedEntries | None,
) -> ServedEntry | None:
    if shared is not None:
        found = shared(kind, name, version, source, team, label)
        if found is not None:
            return found
    try:
        return make_entry(kind, name, version, source, lazy, team)
    except Exception:  # one broken row must not take the whole catalog down
        log.exception("skipping %s %s v%s for label %s: it cannot be served", kind, name, version, label)
        return None


class SnapshotCache:
    """The served snapshot of each label agents use, kept current by the change feed.

    ``apply`` (called by the notifier for each batch the feed reads, before anyone is notified)
    brings every cached snapshot up to date; ``get`` never waits once a label has a snapshot.
    ``written`` gives read-your-writes: the writer's thread waits (briefly) until the change it
    just committed has been applied, so the next MCP request on this process is served it.
    """

    #: Entries kept parsed and compiled (the most recently used); the others are kept as stored
    #: JSON text and list item, and parsed again when next used. What bounds serving memory at
    #: 100,000 entries: about 6 KB each for these, under 1.5 KB for the rest.
    MATERIALIZED = 4096
    #: Back-off between rebuild attempts of a label whose rebuild failed (doubling).
    RETRY_MIN_S = 0.25
    RETRY_MAX_S = 5.0
    #: How long a write made through this process waits for its change to be served here.
    WRITE_WAIT_S = 2.0
    #: Changes applied per step: a batch (up to 1,000 changes from the feed) is read, parsed and
    #: swapped in slices of this many, with a turn of the event loop between them, so neither the
    #: worker thread's hold on the interpreter nor the swap on the loop grows with the batch.
    APPLY_SLICE = 250

    def __init__(self, catalog: CatalogService) -> None:
        self.catalog = catalog
        self.lazy = Materialized(catalog, self.MATERIALIZED)
        self._snapshots: dict[str, CatalogSnapshot] = {}
        #: Labels being built -> the events dispatched meanwhile (applied on top once built).
        self._building: dict[str, list[ChangeEvent]] = {}
        self._build_locks: dict[str, asyncio.Lock] = {}
        self._apply_lock: asyncio.Lock | None = None
        self._rebuilding: dict[str, asyncio.Task[None]] = {}
        #: The id of the last change applied (or found to concern no snapshot).
        self.applied = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Makes the change feed look at the log now (set by ``follow``): a write waiting for its
        #: change to be applied should not wait for the next poll.
        self._poke: Callable[[], None] | None = None

    # ------------------------------------------------------------------ wiring
    def follow(self, poke: Callable[[], None], position: int) -> None:
        """Called on the event loop once a change feed dispatches to ``apply``: from now on a
        write made through this process waits until its change is served (``written``)."""
        self._loop = asyncio.get_running_loop()
        self._poke = poke
        self.applied = max(self.applied, position)

    def peek(self, label: str) -> CatalogSnapshot | None:
        return self._snapshots.get(label)

    def labels(self) -> list[str]:
        return sorted(self._snapshots)

    def _lock(self) -> asyncio.Lock:
        if self._apply_lock is None:
            self._apply_lock = asyncio.Lock()
        return self._apply_lock

    # ------------------------------------------------------------------ serving
    async def get(self, label: str) -> CatalogSnapshot:
        """The label's snapshot; built (and waited for) only the first time a label is asked for."""
        snapshot = self._snapshots.get(label)
        if snapshot is not None:
            return snapshot
        lock = self._build_locks.setdefault(label, asyncio.Lock())
        async with lock:
            snapshot = self._snapshots.get(label)
            if snapshot is None:
                snapshot = await self._build(label)
            return snapshot

    async def _build(self, label: str) -> CatalogSnapshot:
        """A full build in a worker thread; changes dispatched meanwhile are applied on top before it
        is installed (the old snapshot, if any, serves until then)."""
        pending = self._building.setdefault(label, [])
        try:
            built = await asyncio.to_thread(CatalogSnapshot.build, self.catalog, label, self.lazy, self._shared)
            async with self._lock():
                missed = [event for event in pending if event.id > built.position]
                if missed:
                    loop = asyncio.get_running_loop()
                    patch = await loop.run_in_executor(_apply_thread(), self._prepare, built, missed)
                    built.apply(patch)
                    built.position = max(built.position, missed[-1].id)
                self._snapshots[label] = built
        finally:
            if self._building.get(label) is pending:
                del self._building[label]
        return built

    def _shared(
        self, kind: str, name: str, version: int, source: str, team: str | None, label: str
    ) -> ServedEntry | None:
        """The entry another label already serves at this version (and team), to share (immutable)."""
        for other, snapshot in list(self._snapshots.items()):
            if other == label:
                continue
            entry = snapshot.entries(kind).get(name)
            if entry is not None and entry.same_as(version, source, team):
                return entry
        return None

    # ------------------------------------------------------------------ applying changes
    async def apply(self, events: list[ChangeEvent]) -> None:
        """Bring every snapshot up to date with ``events`` (a batch the change feed read, in order).

        Applied in order, ``APPLY_SLICE`` changes at a time (each slice swapped in without an
        ``await``, so readers see whole changes; writers waiting for a change are released once
        its slice is in). Returns once the whole batch is served: the notifier tells clients only then.
        Raises when the database cannot be read (nothing changed; the feed retries the batch
        while the snapshots keep serving). Any other failure is logged and the labels concerned
        are rebuilt in the background.
        """
        if not events:
            return
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        for label, pending in self._building.items():
            pending.extend(event for event in events if label in event.labels)
        async with self._lock():
            loop = asyncio.get_running_loop()
            for start in range(0, len(events), self.APPLY_SLICE):
                if start:
                    await asyncio.sleep(0)  # a turn for requests between slices
                part = events[start : start + self.APPLY_SLICE]
                touched = set().union(*(event.labels for event in part))
                targets = [self._snapshots[label] for label in sorted(touched) if label in self._snapshots]
                if targets:
                    try:
                        patches = await loop.run_in_executor(_apply_thread(), self._prepare_all, targets, part)
                    except Exception as exc:
                        # Unavailable: earlier slices stay applied (idempotent), the feed retries the batch.
                        if is_unavailable(exc):
                            raise
                        log.exception(
                            "applying changes %d-%d to the served snapshots failed", events[0].id, events[-1].id
                        )
                        # Rebuilt in the background (reading the log after this whole batch):
                        # every label the rest of the batch concerns, whose slices are not applied.
                        part = events[start:]
                        targets = [
                            self._snapshots[label]
                            for label in sorted(set().union(*(event.labels for event in part)))
                            if label in self._snapshots
                        ]
                        for snapshot in targets:
                            self._rebuild_in_background(snapshot.label)
                            snapshot.position = max(snapshot.position, events[-1].id)
                        break
                    for snapshot, patch in patches:  # one synchronous step per slice: no await in it
                        snapshot.apply(patch)
                    for snapshot in targets:
                        snapshot.position = max(snapshot.position, part[-1].id)
                self._applied(part[-1].id)
            self._applied(events[-1].id)

    def _prepare_all(
        self, snapshots: list[CatalogSnapshot], events: list[ChangeEvent]
    ) -> list[tuple[CatalogSnapshot, Patch]]:
        """In a worker thread: one read of the changed entries for every label concerned, then each
        snapshot's patch."""
        wanted: dict[str, set[tuple[str, str]]] = {}
        for event in events:
            for label in event.labels:
                wanted.setdefault(label, set()).add((event.kind, event.name))
        labels = [snapshot.label for snapshot in snapshots]
        keys = set().union(*(wanted.get(label, set()) for label in labels))
        rows = self.catalog.served_rows_of(labels, keys)
        served: dict[str, dict[tuple[str, str], tuple[int, str, str | None]]] = {}
        for kind, name, label, version, source, team in rows:
            served.setdefault(label, {})[(kind, name)] = (version, source, team)
        return [
            (snapshot, self._patch(snapshot, wanted.get(snapshot.label, set()), served.get(snapshot.label, {})))
            for snapshot in snapshots
        ]

    def _prepare(self, snapshot: CatalogSnapshot, events: list[ChangeEvent]) -> Patch:
        return self._prepare_all([snapshot], events)[0][1]

    def _patch(
        self,
        snapshot: CatalogSnapshot,
        keys: Iterable[tuple[str, str]],
        served: Mapping[tuple[str, str], tuple[int, str, str | None]],
    ) -> Patch:
        changes: dict[tuple[str, str], ServedEntry | None] = {}
        entries = {kind: snapshot.entries(kind) for kind in ("prompt", "resource", "tool")}
        for kind, name in keys:
            row = served.get((kind, name))
            if row is None:
                changes[(kind, name)] = None
                continue
            version, source, team = row
            current = entries[kind].get(name)
            if current is not None and current.same_as(version, source, team):
                continue
            changes[(kind, name)] = _entry_for(
                kind, name, version, source, team, snapshot.label, self.lazy, self._shared
            )
        return snapshot.prepare(changes)

    def _applied(self, change_id: int) -> None:
        self.applied = max(self.applied, change_id)
        if self._waiters:
            waiting = []
            for wanted, future in self._waiters:
                if wanted <= self.applied:
                    if not future.done():
                        future.set_result(None)
                else:
                    waiting.append((wanted, future))
            self._waiters = waiting

    def _rebuild_in_background(self, label: str) -> None:
        """Rebuild a label whose snapshot could not be kept current, retrying with a back-off; its
        current snapshot serves until the new one is in."""
        running = self._rebuilding.get(label)
        if running is not None and not running.done():
            return
        task = asyncio.get_running_loop().create_task(self._rebuild(label))
        self._rebuilding[label] = task

    async def _rebuild(self, label: str) -> None:
        delay = self.RETRY_MIN_S
        failing_since: float | None = None
        while True:
            try:
                await self._build(label)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if failing_since is None:  # once per outage, not once per attempt
                    failing_since = time.monotonic()
                    log.warning(
                        "serving the last good catalog snapshot of label %r: rebuilding it failed (%s)",
                        label,
                        describe(exc) if is_unavailable(exc) else exc,
                        exc_info=None if is_unavailable(exc) else exc,
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.RETRY_MAX_S)
            else:
                if failing_since is not None:
                    log.warning("catalog snapshot of label %r rebuilt: serving current content again", label)
                return

    # ------------------------------------------------------------------ read-your-writes
    def written(self, change_id: int) -> None:
        """A write through this process committed ``change_id`` (called in the writer's thread):
        wait until it is applied here, at most ``WRITE_WAIT_S``, so the next MCP request is served
        it. Never raises: the write is done whatever happens here."""
        loop, poke = self._loop, self._poke
        if loop is None or poke is None or loop.is_closed() or self.applied >= change_id:
            return
        poke()
        try:
            if asyncio.get_running_loop() is loop:
                return  # on the loop itself (cannot block it): the feed applies it next
        except RuntimeError:
            pass
        try:
            future = asyncio.run_coroutine_threadsafe(self._wait_applied(change_id), loop)
        except RuntimeError:  # the loop closed meanwhile (shutting down)
            return
        try:
            future.result(timeout=self.WRITE_WAIT_S)
        except Exception:  # TimeoutError (the database is slow or gone), or the loop stopped
            future.cancel()
            log.info("change %d is not served yet after %.1fs; it will be shortly", change_id, self.WRITE_WAIT_S)

    async def _wait_applied(self, change_id: int) -> None:
        if self.applied >= change_id:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((change_id, future))
        try:
            await future
        finally:
            self._waiters = [(wanted, waiting) for wanted, waiting in self._waiters if waiting is not future]
