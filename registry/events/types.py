"""Which change-log rows are which events, who wants them (filters), and what is sent.

Every event is one change-log row (``registry.db.models.Change``), so its id orders it and a
delivery is named after it. Catalog rows (kinds prompt, resource, tool) and governance events
(``append_event``) both feed it; rows of other actions (a team move, a token issued) are no event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from registry.db.changelog import CATALOG_KINDS

#: Event type -> what it means (the README and the web UI's form show these).
EVENT_TYPES: dict[str, str] = {
    "catalog.version.created": "a new version of an entry was saved (created, edited, imported, an old one restored)",
    "catalog.label.moved": "a label was moved to a version (published, promoted, rolled back)",
    "catalog.entry.archived": "an entry was archived",
    "catalog.entry.restored": "an archived entry was restored",
    "change_request.opened": "a change request was opened",
    "change_request.approved": "a reviewer approved a change request",
    "change_request.rejected": "a reviewer rejected a change request",
    "change_request.published": "a change request was published (its label moved)",
    "tool.test.failed": "a tool test call (API or web UI) ended in an error result",
}

#: (row kind class, action) -> event type. ``catalog`` stands for the catalog kinds.
_BY_ACTION: dict[tuple[str, str], str] = {
    ("catalog", "created"): "catalog.version.created",
    ("catalog", "updated"): "catalog.version.created",
    ("catalog", "label_moved"): "catalog.label.moved",
    ("catalog", "archived"): "catalog.entry.archived",
    ("catalog", "restored"): "catalog.entry.restored",
    ("change_request", "cr_opened"): "change_request.opened",
    ("change_request", "cr_approved"): "change_request.approved",
    ("change_request", "cr_rejected"): "change_request.rejected",
    ("change_request", "cr_published"): "change_request.published",
    ("tool_test", "test_failed"): "tool.test.failed",
}
#: The change-log kind of a failed tool test (not ``tool``: catalog rows are replayed by the audit check).
TOOL_TEST_KIND = "tool_test"
TOOL_TEST_FAILED = "test_failed"
#: The label every save moves; not named in events (it is not a publication).
_LATEST = "latest"


def event_type(kind: str, action: str) -> str | None:
    """The event a change-log row is, or None."""
    group = "catalog" if kind in CATALOG_KINDS else kind
    return _BY_ACTION.get((group, action))


@dataclass(frozen=True)
class Event:
    """One change-log row as an event: what filters look at and what the body says."""

    change_id: int
    type: str
    timestamp: str
    #: The entry's kind and name (a change request's or tool test's entry too).
    kind: str
    name: str
    team: str | None
    labels: tuple[str, ...]
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def entry(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True)
class Filters:
    """Empty means "any". ``teams`` may name ``-`` for global entries; ``labels`` match an event
    naming one of them (an event that names no label never matches a label filter)."""

    kinds: tuple[str, ...] = ()
    name_prefix: str = ""
    teams: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> Filters:
        raw = raw or {}
        return cls(
            kinds=tuple(raw.get("kinds") or ()),
            name_prefix=str(raw.get("name_prefix") or ""),
            teams=tuple(raw.get("teams") or ()),
            labels=tuple(raw.get("labels") or ()),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "kinds": list(self.kinds),
            "name_prefix": self.name_prefix,
            "teams": list(self.teams),
            "labels": list(self.labels),
        }

    def matches(self, event: Event) -> bool:
        if self.kinds and event.kind not in self.kinds:
            return False
        if self.name_prefix and not event.name.startswith(self.name_prefix):
            return False
        if self.teams and (event.team or "-") not in self.teams:
            return False
        return not self.labels or any(label in self.labels for label in event.labels)


def catalog_event(row: Any, kind_of_event: str) -> Event:
    """An event of a catalog row (``row``: a ``Change``)."""
    labels = tuple(label for label in (row.labels or []) if label != _LATEST)
    return Event(
        change_id=row.id,
        type=kind_of_event,
        timestamp=row.created_at.isoformat(),
        kind=row.kind,
        name=row.name,
        team=row.team,
        labels=labels,
        data={
            "kind": row.kind,
            "name": row.name,
            "version": row.version,
            "labels": list(labels),
            "team": row.team,
            "actor": row.actor,
            "note": row.note,
        },
    )


def change_request_event(row: Any, kind_of_event: str, request: Any | None) -> Event:
    """An event of a change-request row; ``request`` is its ``ChangeRequest`` (None: deleted since)."""
    kind, _, name = row.name.partition("/")
    labels: tuple[str, ...] = (request.label,) if request is not None else ()
    details: dict[str, Any] = {"id": _request_id(row.ref)}
    if request is not None:
        details.update(
            label=request.label,
            from_version=request.from_version,
            to_version=request.to_version,
            title=request.title,
            author=request.author,
        )
    return Event(
        change_id=row.id,
        type=kind_of_event,
        timestamp=row.created_at.isoformat(),
        kind=kind,
        name=name,
        team=row.team,
        labels=labels,
        data={
            "kind": kind,
            "name": name,
            "version": row.version,
            "labels": list(labels),
            "team": row.team,
            "actor": row.actor,
            "note": row.note,
            "change_request": details,
        },
    )


def tool_test_event(row: Any, kind_of_event: str) -> Event:
    return Event(
        change_id=row.id,
        type=kind_of_event,
        timestamp=row.created_at.isoformat(),
        kind="tool",
        name=row.name,
        team=row.team,
        labels=(),
        data={
            "kind": "tool",
            "name": row.name,
            "version": row.version,
            "team": row.team,
            "actor": row.actor,
            "error": row.note,
        },
    )


def _request_id(ref: str | None) -> int | None:
    if ref and ref.startswith("change_request:"):
        tail = ref.partition(":")[2]
        return int(tail) if tail.isdigit() else None
    return None


def request_id_of(row: Any) -> int | None:
    return _request_id(row.ref)


#: At most this many bytes of a note (or error) go into ``text`` when the body must be cut.
TEXT_DETAIL_BYTES = 300
_ELLIPSIS = "…"


def mrkdwn(value: Any) -> str:
    """``value`` as inert Slack mrkdwn on one line: ``&``, ``<`` and ``>`` escaped as Slack asks
    (so ``<!channel>`` or ``<https://evil|label>`` in a note is shown, not acted on), and every run
    of whitespace, newlines included, made one space (a note cannot forge a second line)."""
    text = " ".join(str(value).split())
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_text(event: Event, *, detail_bytes: int | None = None) -> str:
    """One line a chat channel shows; every value in it escaped (``mrkdwn``). ``detail_bytes``:
    cut the note (or error) to that many UTF-8 bytes first."""
    data = event.data
    version = f" v{mrkdwn(data['version'])}" if data.get("version") is not None else ""
    labels = f" [{mrkdwn(', '.join(event.labels))}]" if event.labels else ""
    what = EVENT_TYPES.get(event.type, event.type)
    detail = str(data.get("note") or data.get("error") or "")
    if detail_bytes is not None and len(detail.encode()) > detail_bytes:
        detail = _prefix_bytes(detail, detail_bytes) + _ELLIPSIS
    text = (
        f"{mrkdwn(event.type)}: {mrkdwn(event.kind)} {mrkdwn(event.name)}{version}{labels}"
        f" by {mrkdwn(data.get('actor'))} ({mrkdwn(what)})"
    )
    return f"{text}: {mrkdwn(detail)}" if detail else text


def body(event: Event, *, with_text: bool, max_bytes: int) -> str:
    """The JSON sent for ``event``: ``{"type", "timestamp", "data"}`` (and ``text``), at most
    ``max_bytes`` UTF-8 bytes where cutting the note (or error) can get it there: the cut one
    ends in an ellipsis, with ``"truncated": true`` in ``data``. Sizes are encoded bytes (a note in
    Cyrillic or emoji has several per character), and ``text``, which quotes the note too, is cut
    on its own first so the note's excess is not counted twice."""
    data = {"change_id": event.change_id, **event.data}
    document: dict[str, Any] = {"type": event.type, "timestamp": event.timestamp, "data": data}
    if with_text:
        document["text"] = slack_text(event)
    if _size(document) <= max_bytes:
        return _dump(document)
    if with_text:
        document["text"] = slack_text(event, detail_bytes=TEXT_DETAIL_BYTES)
    for member in ("note", "error"):
        value = data.get(member)
        if not isinstance(value, str) or not value or _size(document) <= max_bytes:
            continue
        data["truncated"] = True
        excess = _size(document) - max_bytes
        keep = _json_bytes(value) - excess - _json_bytes(_ELLIPSIS)
        data[member] = _prefix_json(value, keep) + _ELLIPSIS
    return _dump(document)


def _size(document: Mapping[str, Any]) -> int:
    return len(_dump(document).encode())


def _json_bytes(value: str) -> int:
    """Bytes ``value`` takes inside a JSON string (its escapes included), quotes excluded."""
    return len(json.dumps(value, ensure_ascii=False).encode()) - 2


def _prefix_json(value: str, budget: int) -> str:
    """The longest prefix of ``value`` taking at most ``budget`` bytes inside a JSON string."""
    used = 0
    for index, char in enumerate(value):
        used += _json_bytes(char)
        if used > budget:
            return value[:index]
    return value


def _prefix_bytes(value: str, budget: int) -> str:
    """The longest prefix of ``value`` of at most ``budget`` UTF-8 bytes (never half a character)."""
    return value.encode()[: max(0, budget)].decode(errors="ignore")


def _dump(document: Mapping[str, Any]) -> str:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"), sort_keys=False)
