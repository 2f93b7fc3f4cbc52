"""live_rows: the live requests' rows at step ends (a seek of the request table folds from
them); the requests indexes hold what a page reads (done, never scheduled, status,
preemptions, latencies), so the table at a step is counted and paged from indexes alone

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

ORDER = ["arrival_step", "arrival_seq", "req_id", "finish_step"]
STATE = ["first_scheduled_step", "status", "num_preemptions", "ttft", "e2e"]
INDEXES = {
    "ix_requests_session_finish": [
        "session_id",
        "finish_step",
        "status",
        "num_preemptions",
        "ttft",
        "e2e",
    ],
    "ix_requests_session_order": ["session_id", *ORDER, *STATE],
    "ix_requests_session_ttft": ["session_id", "ttft", *ORDER],
    "ix_requests_session_e2e": ["session_id", "e2e", *ORDER],
}
BEFORE = {
    "ix_requests_session_finish": ["session_id", "finish_step"],
    "ix_requests_session_order": ["session_id", *ORDER],
    "ix_requests_session_ttft": ["session_id", "ttft"],
    "ix_requests_session_e2e": ["session_id", "e2e"],
}


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
    # The indexes hold what a page's conditions and order read (app.db.request_page).
    for name, columns in INDEXES.items():
        op.drop_index(name, table_name="requests")
        op.create_index(name, "requests", columns)


def downgrade() -> None:
    for name, columns in BEFORE.items():
        op.drop_index(name, table_name="requests")
        op.create_index(name, "requests", columns)
    op.drop_table("live_rows")
