"""done_counts: an ended recording's done counts, stored when it ends, so that a replay's
first seeks do not count every done request (app.db.done_counts)

Revision ID: 0010_done_counts
Revises: 0009_request_segments
Create Date: 2026-12-07 02:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_done_counts"
down_revision = "0009_request_segments"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "done_counts",
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.Column("counts", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_done_counts_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_done_counts")),
    )


def downgrade() -> None:
    op.drop_table("done_counts")
