"""governance: teams, protected labels, change requests, audit chain, single sign-on, usage

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 08:00:00.000000

- ``teams``; ``entries.team`` (None: a global entry, which is what every existing entry becomes,
  so every agent keeps seeing it); ``api_tokens.teams`` (team -> role; existing tokens: none, so
  they keep the access their scopes gave).
- ``changes`` gains the audit columns and the hash chain; existing rows are chained here, in id
  order, so ``mcp-registry audit verify`` covers the whole history from the first change.
- ``protected_labels``, ``change_requests``, ``change_request_reviews``: reviewed publishing.
- ``ui_sessions.token_id`` may be empty (a single-sign-on session) and ``identity`` holds the user;
  ``mcp_sessions.user``: the single-sign-on user an MCP session belongs to.
- ``usage_counts``: uses per entry version, agent and hour.
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from registry.db.audit import chain

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Rows chained per round trip while backfilling the change log's hashes.
_BATCH = 2000


def upgrade() -> None:
    op.create_table(
        "teams",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("title", sa.String(length=256), nullable=True),
        sa.Column("created_by", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_teams")),
    )
    with op.batch_alter_table("entries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("team", sa.String(length=64), nullable=True))
        batch_op.create_index(batch_op.f("ix_entries_team"), ["team"], unique=False)

    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("teams", sa.JSON(), nullable=False, server_default=sa.text("'{}'")))

    with op.batch_alter_table("changes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("team", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("audience", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("token_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True))
        batch_op.add_column(sa.Column("user", sa.String(length=256), nullable=True))
        batch_op.add_column(sa.Column("reason", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("override", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch_op.add_column(sa.Column("prev_hash", sa.String(length=64), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("hash", sa.String(length=64), nullable=False, server_default=""))
    _chain_existing_changes()

    op.create_table(
        "protected_labels",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("approvals", sa.Integer(), nullable=True),
        sa.Column("created_by", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_protected_labels")),
    )
    op.create_table(
        "change_requests",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("team", sa.String(length=64), nullable=True),
        sa.Column("label", sa.String(length=64), nullable=False),
        sa.Column("from_version", sa.Integer(), nullable=True),
        sa.Column("to_version", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("title", sa.String(length=256), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("author", sa.String(length=128), nullable=False),
        sa.Column("author_key", sa.String(length=300), nullable=False),
        sa.Column("approvals_required", sa.Integer(), nullable=False),
        sa.Column("checks", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("published_by", sa.String(length=128), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_change_requests")),
    )
    with op.batch_alter_table("change_requests", schema=None) as batch_op:
        batch_op.create_index("ix_change_requests_state", ["state", "id"], unique=False)
    op.create_table(
        "change_request_reviews",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("request_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.Column("reviewer", sa.String(length=128), nullable=False),
        sa.Column("reviewer_key", sa.String(length=300), nullable=False),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("override_checks", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["change_requests.id"],
            name=op.f("fk_change_request_reviews_request_id_change_requests"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_change_request_reviews")),
    )
    with op.batch_alter_table("change_request_reviews", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_change_request_reviews_request_id"), ["request_id"], unique=False)

    with op.batch_alter_table("ui_sessions", schema=None) as batch_op:
        batch_op.alter_column(
            "token_id", existing_type=sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        )
        batch_op.add_column(sa.Column("identity", sa.JSON(), nullable=True))
    with op.batch_alter_table("mcp_sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("user", sa.String(length=256), nullable=True))

    op.create_table(
        "usage_counts",
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("agent", sa.String(length=300), nullable=False),
        sa.Column("method", sa.String(length=8), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("hour", "kind", "name", "version", "agent", "method", name=op.f("pk_usage_counts")),
    )
    with op.batch_alter_table("usage_counts", schema=None) as batch_op:
        batch_op.create_index("ix_usage_counts_entry", ["kind", "name", "hour"], unique=False)


def _chain_existing_changes() -> None:
    """Hash every existing change row, in id order (each links to the one before it)."""
    bind = op.get_bind()
    changes = sa.table(
        "changes",
        sa.column("id", sa.BigInteger()),
        sa.column("created_at", sa.DateTime(timezone=True)),
        sa.column("kind", sa.String()),
        sa.column("name", sa.String()),
        sa.column("action", sa.String()),
        sa.column("version", sa.Integer()),
        sa.column("labels", sa.JSON()),
        sa.column("uris", sa.JSON()),
        sa.column("listing_changed", sa.JSON()),
        sa.column("actor", sa.String()),
        sa.column("note", sa.Text()),
        sa.column("prev_hash", sa.String()),
        sa.column("hash", sa.String()),
    )
    prev_hash = ""
    after = 0
    while True:
        found = bind.execute(
            sa.select(changes).where(changes.c.id > after).order_by(changes.c.id).limit(_BATCH)
        ).mappings()
        # Naive timestamps (SQLite) are UTC; ``chain`` reads them so, as the model does.
        rows: list[dict[str, Any]] = [dict(row) for row in found]
        if not rows:
            return
        prev_hash = chain(rows, prev_hash)
        bind.execute(
            changes.update().where(changes.c.id == sa.bindparam("row_id")),
            [{"row_id": r["id"], "prev_hash": r["prev_hash"], "hash": r["hash"]} for r in rows],
        )
        after = rows[-1]["id"]


def downgrade() -> None:
    with op.batch_alter_table("usage_counts", schema=None) as batch_op:
        batch_op.drop_index("ix_usage_counts_entry")
    op.drop_table("usage_counts")
    with op.batch_alter_table("mcp_sessions", schema=None) as batch_op:
        batch_op.drop_column("user")
    with op.batch_alter_table("ui_sessions", schema=None) as batch_op:
        batch_op.drop_column("identity")
    op.execute("DELETE FROM ui_sessions WHERE token_id IS NULL")
    with op.batch_alter_table("ui_sessions", schema=None) as batch_op:
        batch_op.alter_column(
            "token_id", existing_type=sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        )
    with op.batch_alter_table("change_request_reviews", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_change_request_reviews_request_id"))
    op.drop_table("change_request_reviews")
    with op.batch_alter_table("change_requests", schema=None) as batch_op:
        batch_op.drop_index("ix_change_requests_state")
    op.drop_table("change_requests")
    op.drop_table("protected_labels")
    with op.batch_alter_table("changes", schema=None) as batch_op:
        for column in ("hash", "prev_hash", "override", "reason", "user", "token_id", "audience", "team"):
            batch_op.drop_column(column)
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_column("teams")
    # Not batch mode: rebuilding ``entries`` on SQLite would have to copy its generated search
    # column, which batch mode cannot; SQLite 3.35+ drops a plain column in place.
    op.drop_index(op.f("ix_entries_team"), table_name="entries")
    op.drop_column("entries", "team")
    op.drop_table("teams")
