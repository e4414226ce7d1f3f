"""change effects: which labels' MCP lists a change alters

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-16 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable: rows written before it count as "every label's list changed" (the safe default).
    with op.batch_alter_table("changes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("listing_changed", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("changes", schema=None) as batch_op:
        batch_op.drop_column("listing_changed")
