"""one verdict per reviewer and turn: ``change_request_reviews.after_review_id``

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05 05:00:00.000000

Each review names the same reviewer's previous review of the same request (``after_review_id``;
0 for their first), and ``(request_id, reviewer_key, after_review_id)`` is unique. A reviewer who
clicks Approve twice, or whose retried call races the first on another replica, writes one row:
the second insert names the same predecessor and the database refuses it, whatever the
application saw. Existing rows are linked here in id order (duplicates already recorded stay, as
history, each after the one before it).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UNIQUE = "uq_cr_reviews_chain"


def upgrade() -> None:
    with op.batch_alter_table("change_request_reviews", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "after_review_id",
                sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                nullable=False,
                server_default="0",
            )
        )
    op.execute(
        "UPDATE change_request_reviews SET after_review_id = COALESCE(("
        "SELECT MAX(p.id) FROM change_request_reviews p "
        "WHERE p.request_id = change_request_reviews.request_id "
        "AND p.reviewer_key = change_request_reviews.reviewer_key "
        "AND p.id < change_request_reviews.id), 0)"
    )
    with op.batch_alter_table("change_request_reviews", schema=None) as batch_op:
        batch_op.create_unique_constraint(UNIQUE, ["request_id", "reviewer_key", "after_review_id"])


def downgrade() -> None:
    with op.batch_alter_table("change_request_reviews", schema=None) as batch_op:
        batch_op.drop_constraint(UNIQUE, type_="unique")
        batch_op.drop_column("after_review_id")
