"""The values the catalog's operations take and answer: how a write is made, an entry's version as
shown, a write's result, a page of a list.

Plain values shared by the focused parts of the catalog service (``registry.catalog.service``) and
their callers (the API, the web UI, the CLI, the MCP layer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from registry.catalog.access import Access
from registry.catalog.preconditions import make_etag
from registry.catalog.protection import ReviewAsk
from registry.db.audit import Actor


@dataclass(frozen=True)
class WriteOptions:
    """How a write is made, as opposed to what it writes: one object every write takes (``create``,
    ``update``, ``patch``, ``restore_version``, ``set_label``, ``delete_label``, ``set_archived``,
    ``set_team``), each reading the options that apply to it.

    ``actor`` makes the write with ``access``'s rights (None: the system's); ``note`` is the change
    note; ``labels`` are pointed at a saved version (default ``production``); ``if_match`` is the
    ``If-Match`` precondition; ``review`` asks for a change request per protected label a save
    holds; ``override_reason`` is an admin's emergency override of a protected label move."""

    actor: Actor | str
    access: Access | None = None
    note: str | None = None
    labels: list[str] | None = None
    if_match: str | None = None
    review: ReviewAsk | None = None
    override_reason: str | None = None


@dataclass(frozen=True)
class EntryView:
    """One version of an entry as the API shows it (write-only values masked)."""

    kind: str
    name: str
    version: int
    latest_version: int
    spec: dict[str, Any]
    labels: dict[str, int]
    archived: bool
    author: str
    change_note: str | None
    created_at: datetime
    updated_at: datetime
    #: The team that owns the entry; None: a global entry, seen by everyone.
    team: str | None = None
    #: When this version was saved (``created_at`` and ``updated_at`` are the entry's).
    saved_at: datetime | None = None

    @property
    def etag(self) -> str:
        return make_etag(self.latest_version)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "version": self.version,
            "latest_version": self.latest_version,
            "labels": self.labels,
            "archived": self.archived,
            "team": self.team,
            "author": self.author,
            "change_note": self.change_note,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "spec": self.spec,
        }


@dataclass
class Page:
    items: list[dict[str, Any]]
    total: int
    limit: int
    offset: int
    #: False when ``total`` stopped counting at ``registry.db.search.EXACT_COUNT_UP_TO``.
    total_exact: bool = True


@dataclass(frozen=True)
class WriteResult:
    view: EntryView
    change_id: int | None = None
    changed: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    #: Protected labels the save would have moved but left where they were (``registry.catalog.protection``).
    held: list[str] = field(default_factory=list)
    #: Ids of the change requests the save opened to move them (when it was asked to).
    change_requests: list[int] = field(default_factory=list)
