"""web UI sessions

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-17 10:00:00.000000

One row per signed-in browser (``registry.ui.sessions``): the SHA-256 of the cookie's secret,
the API token it stands for, its CSRF token and when it ends.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ui_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("token_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("csrf_token", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["token_id"], ["api_tokens.id"], name=op.f("fk_ui_sessions_token_id_api_tokens"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ui_sessions")),
    )
    with op.batch_alter_table("ui_sessions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_ui_sessions_expires_at"), ["expires_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_ui_sessions_token_id"), ["token_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("ui_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ui_sessions_token_id"))
        batch_op.drop_index(batch_op.f("ix_ui_sessions_expires_at"))
    op.drop_table("ui_sessions")
