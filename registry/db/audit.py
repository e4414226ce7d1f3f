"""Who made a change, and the keyed chain that makes the change log tamper-evident.

Every change-log row carries its actor (a name, the API token or single-sign-on user, a reason),
``digest``: the SHA-256 of what the change made (the versions it wrote, the version a label now
names, a change request with its reviews after the event), ``ref`` (what a governance event is
about, ``change_request:12``, ``token:3``) and ``hash``: an HMAC-SHA256, under a key that is not in
the database (``REGISTRY_AUDIT_KEY``, else derived from ``REGISTRY_SECRET_KEY``), over the row's
canonical content, which includes ``prev_hash``, the MAC of the row before it. Editing, deleting
or reordering a row breaks the chain at that row; re-computing the chain needs the key. Because
the digests are in the chain, ``registry.catalog.audit_verify`` can also tell when the tables
the rows describe (versions, labels, change requests, reviews) were edited behind its back.

Rows written before the chain was keyed (format 1, migration 0008) are plain SHA-256 and may
only precede keyed ones: the first keyed row's MAC covers the last of them. The canonical form
is part of the stored data: changing ``canonical_content`` would break every existing chain, so
it is versioned by ``CHAIN_FORMAT`` instead.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

#: The format new rows are written in: keyed (HMAC) over ``KEYED_COLUMNS``.
CHAIN_FORMAT = 2
#: Rows written before the chain was keyed: SHA-256 over ``HASHED_COLUMNS``.
LEGACY_FORMAT = 1

#: The columns a format-1 row's hash covers (``id`` is not one: the chain itself orders the rows,
#: and bulk writers hash rows before the database numbers them).
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
#: The columns a keyed (format 2) row's MAC covers.
KEYED_COLUMNS = (*HASHED_COLUMNS, "digest", "ref")
#: Every column verification reads besides ``id`` and ``hash``.
CHAIN_COLUMNS = (*KEYED_COLUMNS, "chain_format")


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


def canonical_content(row: Mapping[str, Any], chain_format: int = LEGACY_FORMAT) -> bytes:
    """The bytes a row's hash or MAC is taken over: the format's columns as sorted-key compact JSON."""
    content: dict[str, Any] = {}
    for column in KEYED_COLUMNS if chain_format >= CHAIN_FORMAT else HASHED_COLUMNS:
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
    content["format"] = chain_format
    return orjson.dumps(content, option=orjson.OPT_SORT_KEYS)


def row_hash(row: Mapping[str, Any]) -> str:
    """A format-1 row's hash: SHA-256, no key (what migration 0008 wrote)."""
    return hashlib.sha256(canonical_content(row)).hexdigest()


def row_mac(row: Mapping[str, Any], key: bytes) -> str:
    """A keyed row's MAC: HMAC-SHA256 under the chain key."""
    return hmac.new(key, canonical_content(row, CHAIN_FORMAT), hashlib.sha256).hexdigest()


def chain(rows: Iterable[dict[str, Any]], prev_hash: str, key: bytes | None = None) -> str:
    """Set ``prev_hash`` and ``hash`` (and ``chain_format``) on each row, in order, after
    ``prev_hash``; the last hash. With ``key``: keyed rows (format 2); without: format 1, which
    only migration 0008 still writes (for the rows that existed before it)."""
    for row in rows:
        row["prev_hash"] = prev_hash
        if key is None:
            prev_hash = row["hash"] = row_hash(row)
        else:
            row["chain_format"] = CHAIN_FORMAT
            row.setdefault("digest", None)
            row.setdefault("ref", None)
            prev_hash = row["hash"] = row_mac(row, key)
    return prev_hash


def row_content(row: Any) -> dict[str, Any]:
    """A change row (ORM object or result row) as the mapping ``row_hash``/``row_mac`` read."""
    mapping = row._mapping if hasattr(row, "_mapping") else None
    if mapping is not None:
        return {column: mapping.get(column) for column in CHAIN_COLUMNS}
    return {column: getattr(row, column, None) for column in CHAIN_COLUMNS}


# ------------------------------------------------------------------ digests of what rows made


def digest(value: Any) -> str:
    """SHA-256 of ``value`` as sorted-key compact JSON (the canonical form of what a row made).
    orjson writes it; a value orjson refuses (an integer beyond 64 bits, which a tool's schema may
    hold; a lone surrogate) is written by the standard library instead, so one value always gets
    one digest. (Specs are stored as ``json``, not ``jsonb``, on PostgreSQL: ``jsonb`` would
    reorder and renormalise them, and every digest with them.)"""
    try:
        encoded = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        # ASCII escapes: a lone surrogate (which orjson refuses too) cannot be UTF-8.
        encoded = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()


def version_digest(kind: str, name: str, number: int, spec: Mapping[str, Any]) -> str:
    """One version's canonical definition: what it is (kind, name, number) and its stored spec."""
    return digest({"kind": kind, "name": name, "version": number, "spec": spec})


def versions_digest(kind: str, name: str, versions: Sequence[tuple[int, Mapping[str, Any]]]) -> str:
    """What a row that wrote ``versions`` (number, stored spec) made: their digests, in order."""
    return digest([version_digest(kind, name, number, spec) for number, spec in versions])


#: What a change request event's digest covers of the request (not timestamps or wording that
#: carries no decision) and of each of its reviews.
REQUEST_FIELDS = (
    "id",
    "kind",
    "name",
    "team",
    "label",
    "from_version",
    "to_version",
    "state",
    "approvals_required",
    "author_key",
)
REVIEW_FIELDS = ("id", "verdict", "reviewer_key", "comment", "override_checks")


def request_digest(request: Mapping[str, Any], reviews: Iterable[Mapping[str, Any]]) -> str:
    """A change request as an event leaves it: its decisive fields and every review so far."""
    return digest(
        {
            "request": {field: request[field] for field in REQUEST_FIELDS},
            "reviews": sorted(
                ({field: review[field] for field in REVIEW_FIELDS} for review in reviews), key=lambda r: r["id"]
            ),
        }
    )


def protection_digest(label: str, approvals: int | None) -> str:
    """What a protection event records: the label and the approvals it needs (None: the default)."""
    return digest({"label": label, "approvals": approvals})


def label_ref(label: str) -> str:
    """The ``ref`` of every event about the protection of ``label``."""
    return f"label:{label}"


def request_ref(request_id: int) -> str:
    """The ``ref`` of every event about change request ``request_id``."""
    return f"change_request:{request_id}"


@dataclass(frozen=True)
class BrokenLink:
    """The first row whose stored hashes do not match its content or its predecessor."""

    id: int
    reason: str


@dataclass
class ChainWalk:
    """Where a walk of the chain has got to (``verify_rows`` continues it batch after batch)."""

    key: bytes
    prev_hash: str = ""
    checked: int = 0
    #: The first keyed row's id (None: none seen yet).
    keyed_from: int | None = None


def verify_rows(rows: Iterable[Any], walk: ChainWalk) -> BrokenLink | None:
    """Walk rows in id order from where ``walk`` is; the first broken link (None: intact so far).

    Each row needs ``id``, ``hash`` and the ``CHAIN_COLUMNS``. A format-1 row after a keyed one
    is a break: rows are never written unkeyed once the chain is keyed, so one means the chain
    was re-computed by someone without the key."""
    for row in rows:
        content = row_content(row)
        stored_prev = content.get("prev_hash") or ""
        if stored_prev != walk.prev_hash:
            return BrokenLink(
                row.id,
                f"prev_hash {stored_prev[:12]}… does not match the previous row's hash {walk.prev_hash[:12]}…",
            )
        keyed = (content.get("chain_format") or LEGACY_FORMAT) >= CHAIN_FORMAT
        if keyed:
            if walk.keyed_from is None:
                walk.keyed_from = row.id
            expected = row_mac(content, walk.key)
            if not hmac.compare_digest(row.hash or "", expected):
                return BrokenLink(
                    row.id, "its MAC does not match its content under the audit key (the row was edited or re-hashed)"
                )
        else:
            if walk.keyed_from is not None:
                return BrokenLink(row.id, "an unkeyed row after keyed ones (the chain was re-computed without the key)")
            if row.hash != row_hash(content):
                return BrokenLink(row.id, "its content does not match its hash (the row was edited)")
        walk.prev_hash = row.hash
        walk.checked += 1
    return None
