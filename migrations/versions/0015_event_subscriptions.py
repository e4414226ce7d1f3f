"""change events to other systems: subscriptions, their deliveries, and the delivering replica's lease

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05 17:40:00.000000

``event_subscriptions`` (an admin's URL, encrypted, in a Text column: its length is bounded by the
configurable ``REGISTRY_LIMIT_URI_CHARS``; events, filters, encrypted signing secret and the cursor:
the last change-log id examined for it), ``event_deliveries`` (one row per subscription and event,
the body fixed when queued, so retries and redeliveries send the same bytes under the same
``webhook-id``) and ``event_leases`` (which replica delivers; ``registry.events.lease``).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

#: As the models spell them (migrations never import the models, which move on).
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "event_subscriptions",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("filters", sa.JSON(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("previous_secret", sa.Text(), nullable=True),
        sa.Column("previous_secret_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("slack_text", sa.Boolean(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("cursor", BigId, nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_event_subscriptions")),
    )
    op.create_table(
        "event_deliveries",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("subscription_id", BigId, nullable=False),
        sa.Column("change_id", BigId, nullable=False),
        sa.Column("webhook_id", sa.String(length=64), nullable=False),
        sa.Column("event_type", sa.String(length=64), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(length=512), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["event_subscriptions.id"],
            name=op.f("fk_event_deliveries_subscription_id_event_subscriptions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_event_deliveries")),
        sa.UniqueConstraint("subscription_id", "change_id", name=op.f("uq_event_deliveries_subscription_id_change_id")),
        sa.UniqueConstraint("webhook_id", name=op.f("uq_event_deliveries_webhook_id")),
    )
    op.create_index(
        "ix_event_deliveries_queue", "event_deliveries", ["subscription_id", "status", "change_id"], unique=False
    )
    op.create_table(
        "event_leases",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("holder", sa.String(length=128), nullable=False),
        sa.Column("epoch", BigId, nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_event_leases")),
    )


def downgrade() -> None:
    op.drop_table("event_leases")
    op.drop_index("ix_event_deliveries_queue", table_name="event_deliveries")
    op.drop_table("event_deliveries")
    op.drop_table("event_subscriptions")
