"""change requests may be published by the approval that completes them

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 08:00:00.000000

``change_requests.publish_when_approved``: chosen by the author when opening the request; the
approving review that brings the approvals needed then publishes it in its own transaction (when
the pre-publish checks pass and the label has not moved). Every existing request: false, as
before (published by hand).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("change_requests") as batch_op:
        batch_op.add_column(sa.Column("publish_when_approved", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("change_requests") as batch_op:
        batch_op.drop_column("publish_when_approved")
