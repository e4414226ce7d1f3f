"""spent request states: each stateless-era requestState answers one retry

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05 05:00:00.000000

``spent_request_states`` holds the SHA-256 of every ``requestState`` a retry has used, until the
state's expiry, so a replay is refused on every replica (registry/mcp/spent_states.py).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "spent_request_states",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_spent_request_states")),
    )
    with op.batch_alter_table("spent_request_states", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_spent_request_states_expires_at"), ["expires_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("spent_request_states", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_spent_request_states_expires_at"))
    op.drop_table("spent_request_states")
