"""connected agents' transport, web UI bundle uploads

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-20 10:00:00.000000

``mcp_sessions.transport``: how each session's client connects (``streamable-http`` or ``sse``),
for the connected-agents page and ``GET /api/v1/agents``; sessions made before this revision have
none (shown as "unknown"). ``ui_uploads``: a bundle uploaded in the web UI, held between its
import plan and "Apply" (``registry.ui.uploads``).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("mcp_sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("transport", sa.String(length=16), nullable=True))

    op.create_table(
        "ui_uploads",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("filename", sa.String(length=255), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ui_uploads")),
    )
    with op.batch_alter_table("ui_uploads", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_ui_uploads_expires_at"), ["expires_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_ui_uploads_owner"), ["owner"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("ui_uploads", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ui_uploads_owner"))
        batch_op.drop_index(batch_op.f("ix_ui_uploads_expires_at"))
    op.drop_table("ui_uploads")

    with op.batch_alter_table("mcp_sessions", schema=None) as batch_op:
        batch_op.drop_column("transport")
