"""ORM models (SQLAlchemy 2.0 typed declarative).

One row per catalog entry (prompt, resource or tool) keyed by kind and name; its immutable
versions hold the full definition as a JSON document (validated by ``registry.catalog.specs``);
labels point at version numbers; the change log records every committed change.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Computed,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

#: BIGINT on PostgreSQL, INTEGER on SQLite (only INTEGER PRIMARY KEY is SQLite's rowid alias).
BigId = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every database.

    PostgreSQL keeps the zone (``timestamptz``) but answers in the session's time zone; SQLite stores
    wall-clock text and hands back naive values. Values are converted to UTC on the way in and out,
    so the API shows the same ``...+00:00`` timestamps whichever database is behind it.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(UTC)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        # Naive from SQLite (stored as UTC); PostgreSQL answers in the session's TimeZone.
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    # Named constraints, so later migrations can alter them on SQLite (batch mode) and PostgreSQL alike.
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )
    type_annotation_map = {
        dict[str, Any]: JSON,
        list[str]: JSON,
        datetime: UtcDateTime(),
    }


#: What catalog search matches (substring, case-insensitive): name, title, description and the
#: ",a,b," tags, lower-cased, one per line. A generated column, so every writer (bulk inserts too)
#: keeps it right; it is indexed by migration 0005 (see ``registry.db.search``).
SEARCH_TEXT_SQL = (
    "lower(name || '\n' || coalesce(title, '') || '\n' || coalesce(description, '') || '\n' || tags || '\n')"
)


class Entry(Base):
    """A named prompt, resource or tool. Its content lives in ``EntryVersion`` rows."""

    __tablename__ = "entries"
    __table_args__ = (
        UniqueConstraint("kind", "name"),
        # Listing a kind in name order, and counting it, read this index alone.
        Index("ix_entries_kind_archived_name", "kind", "archived", "name"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(128))
    #: Resources only: the URI (or URI template) of the newest version, unique across resources.
    uri: Mapped[str | None] = mapped_column(String(2048), unique=True)
    latest_version: Mapped[int] = mapped_column(Integer)
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    #: The team that owns the entry (a ``teams.name``: the catalog service checks it, as a
    #: foreign key would make SQLite rebuild this table); None: a global entry, seen by everyone.
    #: Agents and users see global entries plus their own teams' (admins see all).
    team: Mapped[str | None] = mapped_column(String(64), index=True)
    #: Copies of the newest version's descriptive fields, so listing and search stay in SQL.
    title: Mapped[str | None] = mapped_column(String(256))
    description: Mapped[str | None] = mapped_column(Text)
    #: Tags as ",a,b," so a tag filter is a portable LIKE.
    tags: Mapped[str] = mapped_column(String(1024), default=",")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: Generated from the columns above (VIRTUAL on SQLite, STORED on PostgreSQL); only searched.
    search_text: Mapped[str | None] = mapped_column(Text, Computed(SEARCH_TEXT_SQL), deferred=True)

    versions: Mapped[list[EntryVersion]] = relationship(
        back_populates="entry", order_by="EntryVersion.number", cascade="all, delete-orphan"
    )
    labels: Mapped[list[Label]] = relationship(
        back_populates="entry", order_by="Label.name", cascade="all, delete-orphan"
    )


#: Listing a kind newest update first (ties by name): the web UI's "recently updated" order.
Index("ix_entries_kind_archived_updated", Entry.kind, Entry.archived, Entry.updated_at.desc(), Entry.name)


class EntryVersion(Base):
    """An immutable snapshot of an entry's definition."""

    __tablename__ = "entry_versions"
    __table_args__ = (UniqueConstraint("entry_id", "number"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    entry_id: Mapped[int] = mapped_column(ForeignKey("entries.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    spec: Mapped[dict[str, Any]]
    author: Mapped[str] = mapped_column(String(128))
    change_note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    entry: Mapped[Entry] = relationship(back_populates="versions")


class Label(Base):
    """A movable pointer from a label name (``production``, ``staging``, ...) to a version number."""

    __tablename__ = "labels"

    entry_id: Mapped[int] = mapped_column(ForeignKey("entries.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)

    entry: Mapped[Entry] = relationship(back_populates="labels")


class Change(Base):
    """One committed change, appended in the same transaction as the change itself.

    Ids are handed out in commit order (writers serialise on a lock before appending; see
    ``registry.db.changelog``), so "everything after id N" is a complete, gap-free answer: the
    audit trail, MCP change notifications and stream resumption all read this table.
    """

    __tablename__ = "changes"
    __table_args__ = (Index("ix_changes_entry", "kind", "name"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(128))
    #: created | updated | label_moved | label_deleted | archived | restored
    action: Mapped[str] = mapped_column(String(32))
    version: Mapped[int | None] = mapped_column(Integer)
    #: The labels whose view of the catalog this change alters.
    labels: Mapped[list[str]]
    #: Resources: the URIs whose content may differ for those labels (for resources/updated).
    uris: Mapped[list[str]]
    #: The labels (of ``labels``) whose MCP lists show something different after this change: the
    #: entry appeared, disappeared, or its list item (name, title, description, arguments, schemas,
    #: annotations, URI, mimeType) changed. A template- or content-only edit names none, so no
    #: ``*/list_changed`` is sent for it. None (rows written before this column): all of ``labels``.
    listing_changed: Mapped[list[str] | None]
    actor: Mapped[str] = mapped_column(String(128))
    note: Mapped[str | None] = mapped_column(Text)
    #: The entry's team after the change (None: global, or not an entry's change).
    team: Mapped[str | None] = mapped_column(String(64))
    #: Whose view of the catalog this change can alter: team names, ``*`` for everyone (a global
    #: entry). A move between teams names both. None (rows before migration 0008): everyone.
    audience: Mapped[list[str] | None]
    #: The API token that made the change, if one did.
    token_id: Mapped[int | None] = mapped_column(BigId)
    #: The single-sign-on user (the configured user claim) that made the change, if one did.
    user: Mapped[str | None] = mapped_column(String(256))
    #: Why: required for an emergency override, optional otherwise.
    reason: Mapped[str | None] = mapped_column(Text)
    #: An admin emergency override of a protected label or of failing pre-publish checks.
    override: Mapped[bool] = mapped_column(Boolean, default=False)
    #: SHA-256 (hex) of what the change made: the versions it wrote, the version a label now
    #: names, a change request with its reviews after the event (``registry.db.audit``).
    digest: Mapped[str | None] = mapped_column(String(64))
    #: What a governance event is about (``change_request:12``, ``token:3``); None for entries.
    ref: Mapped[str | None] = mapped_column(String(128))
    #: 2: ``hash`` is an HMAC under the audit key; 1: plain SHA-256 (rows written before the chain was keyed).
    chain_format: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    #: The previous row's ``hash`` ("" for the first row) ...
    prev_hash: Mapped[str] = mapped_column(String(64), default="")
    #: ... and this row's MAC (or, format 1, hash) over its canonical content including
    #: ``prev_hash`` (``registry.db.audit``).
    hash: Mapped[str] = mapped_column(String(64), default="")


class Team(Base):
    """A team: owns entries; tokens and users belong to teams with a role."""

    __tablename__ = "teams"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    title: Mapped[str | None] = mapped_column(String(256))
    created_by: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ProtectedLabel(Base):
    """A protected label: set through the API/UI by an admin, or written here at start-up from
    ``REGISTRY_PROTECTED_LABELS`` (``source``), so every process obeys it, with the variable or not.

    A save never moves a protected label; a change request, approved by ``approvals`` reviewers
    other than its author, does (or an admin's emergency override, with a reason).
    """

    __tablename__ = "protected_labels"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    #: Approvals a change request to this label needs (None: ``REGISTRY_REQUIRED_APPROVALS``).
    approvals: Mapped[int | None] = mapped_column(Integer)
    created_by: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: ``environment`` (``REGISTRY_PROTECTED_LABELS`` wrote it) or ``api`` (an admin did).
    source: Mapped[str] = mapped_column(String(16), default="api", server_default="api")


class ChangeRequest(Base):
    """A request to move a protected label of one entry to a version:
    draft -> in_review -> approved | rejected -> published (or withdrawn)."""

    __tablename__ = "change_requests"
    __table_args__ = (Index("ix_change_requests_state", "state", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(128))
    #: The entry's team when the request was opened (who may review it; what agents it concerns).
    team: Mapped[str | None] = mapped_column(String(64))
    label: Mapped[str] = mapped_column(String(64))
    #: The label's version when the request was opened (None: the label did not exist yet) ...
    from_version: Mapped[int | None] = mapped_column(Integer)
    #: ... and the version it asks the label to point at.
    to_version: Mapped[int] = mapped_column(Integer)
    #: draft | in_review | approved | rejected | published | withdrawn
    state: Mapped[str] = mapped_column(String(16))
    title: Mapped[str | None] = mapped_column(String(256))
    description: Mapped[str | None] = mapped_column(Text)
    author: Mapped[str] = mapped_column(String(128))
    #: Who the author is, for "not your own request": ``token:<id>`` or ``user:<subject>``.
    author_key: Mapped[str] = mapped_column(String(300))
    approvals_required: Mapped[int] = mapped_column(Integer)
    #: The last pre-publish check result (``registry.catalog.checks``), as shown to reviewers.
    checks: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    published_at: Mapped[datetime | None] = mapped_column()
    published_by: Mapped[str | None] = mapped_column(String(128))
    #: Chosen by the author: publish in the transaction of the approval that completes it.
    publish_when_approved: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    reviews: Mapped[list[ChangeRequestReview]] = relationship(
        back_populates="request", order_by="ChangeRequestReview.id", cascade="all, delete-orphan"
    )


class ChangeRequestReview(Base):
    """One reviewer's verdict (or comment) on a change request."""

    __tablename__ = "change_request_reviews"
    #: One verdict per reviewer and turn: a second row naming the same predecessor (a double
    #: click, a retry racing the first on another replica) is refused by the database.
    __table_args__ = (UniqueConstraint("request_id", "reviewer_key", "after_review_id", name="uq_cr_reviews_chain"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    request_id: Mapped[int] = mapped_column(ForeignKey("change_requests.id", ondelete="CASCADE"), index=True)
    #: approve | reject | comment
    verdict: Mapped[str] = mapped_column(String(16))
    reviewer: Mapped[str] = mapped_column(String(128))
    reviewer_key: Mapped[str] = mapped_column(String(300))
    comment: Mapped[str | None] = mapped_column(Text)
    #: A reviewer's override of failing pre-publish checks (needs ``comment`` as the reason).
    override_checks: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: The id of this reviewer's previous review of this request (0: their first).
    after_review_id: Mapped[int] = mapped_column(BigId, default=0, server_default="0")

    request: Mapped[ChangeRequest] = relationship(back_populates="reviews")


class UsageCount(Base):
    """How often one version of an entry was used by one agent in one hour (``registry.catalog.usage``).

    Counted in memory on the hot path and added here in batches.
    """

    __tablename__ = "usage_counts"
    #: (kind, name, hour) for an entry's reports; with ``count``, summing uses reads the index alone.
    __table_args__ = (Index("ix_usage_counts_entry", "kind", "name", "hour", "count"),)

    hour: Mapped[datetime] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    #: ``token:<id>``, ``user:<subject>`` or ``anonymous``.
    agent: Mapped[str] = mapped_column(String(300), primary_key=True)
    #: get (prompts/get) | read (resources/read) | call (tools/call)
    method: Mapped[str] = mapped_column(String(8), primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)


class ApiToken(Base):
    """A bearer token. Only its SHA-256 is stored; the token itself is shown once, at creation."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[list[str]]
    #: Agent tokens: which label the agent is served (None: production).
    label: Mapped[str | None] = mapped_column(String(64))
    created_by: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column()
    revoked_at: Mapped[datetime | None] = mapped_column()
    #: After this instant the token is refused ("token expired"); None: it never expires.
    expires_at: Mapped[datetime | None] = mapped_column()
    #: Team memberships: team name -> role (viewer | editor | reviewer | admin).
    teams: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class McpSession(Base):
    """An MCP session (2024-11-05 ... 2025-11-25 era), shared by every replica.

    Each replica keeps a cache; the row is what lets a session made on one replica be served by
    another, and survive a restart.
    """

    __tablename__ = "mcp_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    protocol_version: Mapped[str] = mapped_column(String(16))
    label: Mapped[str] = mapped_column(String(64))
    principal: Mapped[str] = mapped_column(String(128))
    token_id: Mapped[int | None] = mapped_column(BigId)
    #: The single-sign-on user (subject) that opened it; with ``token_id``, whose session it is.
    user: Mapped[str | None] = mapped_column(String(256))
    client_info: Mapped[dict[str, Any]]
    client_capabilities: Mapped[dict[str, Any]]
    log_level: Mapped[str | None] = mapped_column(String(16))
    subscriptions: Mapped[list[str]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    ended_at: Mapped[datetime | None] = mapped_column()
    #: How the client connects: ``streamable-http`` or ``sse`` (HTTP+SSE); None for rows made
    #: before migration 0007 recorded it. Shown on the connected-agents page.
    transport: Mapped[str | None] = mapped_column(String(16))


class UiSession(Base):
    """A signed-in web UI session (``/ui/``), shared by every replica.

    The browser holds a random secret in an HttpOnly cookie; only its SHA-256 is stored here, so
    the table leaks no usable session. The session stands for the API token pasted at sign-in:
    every request re-reads that token's row, so revoking or expiring the token ends the session.
    """

    __tablename__ = "ui_sessions"

    #: SHA-256 (hex) of the cookie's secret.
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    #: The token signed in with; None for a single-sign-on session (``identity`` says who).
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True)
    #: Single sign-on: the user's identity as the ID token said at sign-in (subject, name,
    #: scopes, teams), so every replica can rebuild the principal without the issuer.
    identity: Mapped[dict[str, Any] | None]
    #: Sent back with every form and htmx request (hidden field / X-CSRF-Token header).
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: Absolute end of the session (REGISTRY_UI_SESSION_HOURS after sign-in, or the token's expiry).
    expires_at: Mapped[datetime] = mapped_column(index=True)


class UiUpload(Base):
    """A bundle uploaded in the web UI, held between its import plan and "Apply" (``/ui/bundles``).

    In the database, not in the process: behind a load balancer without affinity the plan page and
    the apply may be served by different replicas. Bounded: one per UI session (a new upload
    replaces it), ``REGISTRY_LIMIT_BUNDLE_BYTES`` each, kept for a short while (``expires_at``).
    """

    __tablename__ = "ui_uploads"

    #: Random; named in the plan page's URL.
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    #: Which UI session uploaded it (a digest derived from the session, never the session itself).
    owner: Mapped[str] = mapped_column(String(64), index=True)
    filename: Mapped[str] = mapped_column(String(255))
    content: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(index=True)


class SpentRequestState(Base):
    """A stateless-era ``requestState`` that has been answered once (``registry.mcp.spent_states``).

    Only a digest of the state is kept, with the state's own expiry: until then a replay of it is
    refused, on every replica (they share this table); after it the state is refused as expired
    anyway, so the row is pruned. Bounded by the states answered within one state lifetime.
    """

    __tablename__ = "spent_request_states"

    #: SHA-256 (hex) of the ``requestState`` as the client sent it back.
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    #: When the state expires (after it, the row serves no purpose and is pruned).
    expires_at: Mapped[datetime] = mapped_column(index=True)


class EventSubscription(Base):
    """An admin's subscription to change events (``registry.events``): where they are POSTed, which
    ones, and the signing secret (encrypted with the ``SecretBox``, never shown after creation).

    ``cursor`` is the last change-log id the delivering replica examined for this subscription:
    the rows after it are turned into ``EventDelivery`` rows in the transaction that moves it, so a
    restart (or another replica taking over) neither skips nor repeats an event.
    """

    __tablename__ = "event_subscriptions"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128))
    #: The receiver's URL, encrypted like the secret (a Slack webhook's path is its credential).
    #: Text: its length is bounded by ``REGISTRY_LIMIT_URI_CHARS`` (configurable), not the column.
    url: Mapped[str] = mapped_column(Text)
    #: Event types delivered (``registry.events.types.EVENT_TYPES``).
    events: Mapped[list[str]]
    #: ``{"kinds": [...], "name_prefix": "...", "teams": [...], "labels": [...]}``; absent or empty: any.
    filters: Mapped[dict[str, Any]]
    #: The signing secret (``whsec_...``), encrypted.
    secret: Mapped[str] = mapped_column(Text)
    #: After a rotation, the previous secret (encrypted), also signing until ``previous_secret_until``,
    #: so receivers can move to the new one without refusing an event meanwhile.
    previous_secret: Mapped[str | None] = mapped_column(Text)
    previous_secret_until: Mapped[datetime | None] = mapped_column()
    #: Add a Slack-compatible ``text`` member to each body.
    slack_text: Mapped[bool] = mapped_column(Boolean, default=False)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    #: The last change-log id examined for this subscription.
    cursor: Mapped[int] = mapped_column(BigId, default=0)
    created_by: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class EventDelivery(Base):
    """One event for one subscription: what is sent (the body is fixed when the event is queued, so a
    retry or a redelivery sends the same bytes under the same ``webhook_id``) and how it went.

    pending -> delivered | failed (after ``REGISTRY_EVENTS_MAX_ATTEMPTS``); "redeliver" makes it
    pending again. Per subscription, the oldest pending delivery goes first (change-log order).
    """

    __tablename__ = "event_deliveries"
    __table_args__ = (
        UniqueConstraint("subscription_id", "change_id"),
        Index("ix_event_deliveries_queue", "subscription_id", "status", "change_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    subscription_id: Mapped[int] = mapped_column(ForeignKey("event_subscriptions.id", ondelete="CASCADE"))
    change_id: Mapped[int] = mapped_column(BigId)
    #: ``msg_<subscription>_<change>``: stable, so receivers can drop duplicates.
    webhook_id: Mapped[str] = mapped_column(String(64), unique=True)
    event_type: Mapped[str] = mapped_column(String(64))
    #: The JSON body sent, as text.
    body: Mapped[str] = mapped_column(Text)
    #: pending | delivered | failed
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(String(512))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_attempt_at: Mapped[datetime | None] = mapped_column()
    delivered_at: Mapped[datetime | None] = mapped_column()


class EventLease(Base):
    """Which process delivers change events: one row per lease name, held by ``holder`` until
    ``expires_at`` (renewed by the holder well before). ``epoch`` grows at every change of holder and
    fences writes: a holder that lost the lease (paused past its expiry) cannot record a result."""

    __tablename__ = "event_leases"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128))
    epoch: Mapped[int] = mapped_column(BigId, default=0)
    expires_at: Mapped[datetime] = mapped_column()
