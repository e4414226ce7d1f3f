"""keyed audit chain: what each change made, what each event is about, the row's chain format

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05 05:00:00.000000

- ``changes.digest``: SHA-256 of what the change made (versions, a label's target, a change
  request with its reviews); ``changes.ref``: what a governance event is about;
  ``changes.chain_format``: 1 for every existing row (plain SHA-256, as migration 0008 chained
  them), 2 for rows written from now on (HMAC under the audit key).

Existing rows are not re-hashed: a migration has no audit key, and rewriting history is what the
chain exists to show. The first start after this migration appends a keyed ``chain_keyed`` event
whose digest covers every version written before it (``registry.catalog.audit_verify``).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("changes") as batch_op:
        batch_op.add_column(sa.Column("digest", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("ref", sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column("chain_format", sa.Integer(), nullable=False, server_default="1"))


def downgrade() -> None:
    with op.batch_alter_table("changes") as batch_op:
        batch_op.drop_column("chain_format")
        batch_op.drop_column("ref")
        batch_op.drop_column("digest")
