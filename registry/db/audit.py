"""Who made a change, and the hash chain that makes the change log tamper-evident.

Every change-log row carries its actor (a name, the API token or single-sign-on user, a reason)
and ``hash``: SHA-256 over the row's canonical content, which includes ``prev_hash``, the hash
of the row before it. Editing, deleting or reordering a row by hand breaks the chain at that
row, which ``verify_chain`` (``mcp-registry audit verify``) reports. The canonical form is part
of the stored data: changing ``canonical_content`` would break every existing chain, so it is
versioned by ``CHAIN_FORMAT`` instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

#: Bumped only together with a migration that re-chains every row.
CHAIN_FORMAT = 1

#: The columns a row's hash covers (``id`` is not one: the chain itself orders the rows, and
#: bulk writers hash rows before the database numbers them).
HASHED_COLUMNS = (
    "created_at",
    "kind",
    "name",
    "action",
    "version",
    "labels",
    "uris",
    "listing_changed",
    "actor",
    "note",
    "team",
    "audience",
    "token_id",
    "user",
    "reason",
    "override",
    "prev_hash",
)


@dataclass(frozen=True)
class Actor:
    """Who makes a write, as the audit trail records it.

    ``name`` is what lists show ("alice@corp", a token's name, "seed"); ``token_id`` and ``user``
    say which credential it was; ``reason`` is the caller's why (required for overrides).
    """

    name: str
    token_id: int | None = None
    user: str | None = None
    reason: str | None = None
    override: bool = False

    @property
    def key(self) -> str:
        """Identifies the person or credential (for "not your own change request")."""
        if self.user:
            return f"user:{self.user}"
        if self.token_id is not None:
            return f"token:{self.token_id}"
        return f"name:{self.name}"

    def with_reason(self, reason: str | None, *, override: bool = False) -> Actor:
        return Actor(self.name, self.token_id, self.user, reason, override)


def as_actor(actor: Actor | str) -> Actor:
    return actor if isinstance(actor, Actor) else Actor(name=actor)


def _timestamp(value: datetime | str) -> str:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def canonical_content(row: Mapping[str, Any]) -> bytes:
    """The bytes a row's hash is taken over: ``HASHED_COLUMNS`` as sorted-key compact JSON."""
    content: dict[str, Any] = {}
    for column in HASHED_COLUMNS:
        value = row.get(column)
        if column == "created_at":
            value = _timestamp(value) if value is not None else None
        elif column in ("labels", "uris") and value is None:
            value = []
        elif column == "override":
            value = bool(value)
        elif column == "prev_hash":
            value = value or ""
        content[column] = value
    content["format"] = CHAIN_FORMAT
    return orjson.dumps(content, option=orjson.OPT_SORT_KEYS)


def row_hash(row: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_content(row)).hexdigest()


def chain(rows: Iterable[dict[str, Any]], prev_hash: str) -> str:
    """Set ``prev_hash`` and ``hash`` on each row, in order, after ``prev_hash``; the last hash."""
    for row in rows:
        row["prev_hash"] = prev_hash
        prev_hash = row["hash"] = row_hash(row)
    return prev_hash


def row_content(row: Any) -> dict[str, Any]:
    """A change row (ORM object or result row) as the mapping ``row_hash`` reads."""
    mapping = row._mapping if hasattr(row, "_mapping") else None
    if mapping is not None:
        return {column: mapping.get(column) for column in HASHED_COLUMNS}
    return {column: getattr(row, column, None) for column in HASHED_COLUMNS}


@dataclass(frozen=True)
class BrokenLink:
    """The first row whose stored hashes do not match its content or its predecessor."""

    id: int
    reason: str


def verify_rows(rows: Iterable[Any], prev_hash: str = "") -> tuple[int, BrokenLink | None]:
    """Walk rows in id order; how many verified, and the first broken link (None: intact).

    Each row needs ``id``, ``hash`` and the ``HASHED_COLUMNS``.
    """
    checked = 0
    for row in rows:
        content = row_content(row)
        stored_prev = content.get("prev_hash") or ""
        if stored_prev != prev_hash:
            return checked, BrokenLink(
                row.id, f"prev_hash {stored_prev[:12]}… does not match the previous row's hash {prev_hash[:12]}…"
            )
        expected = row_hash(content)
        if row.hash != expected:
            return checked, BrokenLink(row.id, "its content does not match its hash (the row was edited)")
        prev_hash = row.hash
        checked += 1
    return checked, None
