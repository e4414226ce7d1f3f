"""protected labels remember who protected them: the environment or the API

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05 05:00:00.000000

``protected_labels.source``: ``environment`` for a label ``REGISTRY_PROTECTED_LABELS`` wrote into
the table at start-up, ``api`` for one an admin protected (every existing row). The table is the
catalog's protection: a process started without the variable obeys it all the same.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("protected_labels") as batch_op:
        batch_op.add_column(sa.Column("source", sa.String(length=16), nullable=False, server_default="api"))


def downgrade() -> None:
    with op.batch_alter_table("protected_labels") as batch_op:
        batch_op.drop_column("source")
