"""live_rows: the live requests' rows at step ends (a seek of the request table folds from
them); the order index also holds first_scheduled_step (requests never scheduled by a step
are told from it)

Revision ID: 0008_live_rows
Revises: 0007_request_order_index
Create Date: 2026-12-02 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_live_rows"
down_revision = "0007_request_order_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "live_rows",
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_live_rows_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "seq", name=op.f("pk_live_rows")),
    )
    op.drop_index("ix_requests_session_order", table_name="requests")
    op.create_index(
        'ix_requests_session_order',
        'requests',
        ['session_id', 'arrival_step', 'arrival_seq', 'req_id', 'finish_step',
         'first_scheduled_step'],
    )  # fmt: skip


def downgrade() -> None:
    op.drop_index("ix_requests_session_order", table_name="requests")
    op.create_index(
        "ix_requests_session_order",
        "requests",
        ["session_id", "arrival_step", "arrival_seq", "req_id", "finish_step"],
    )
    op.drop_table("live_rows")
