"""requests.segments: each done request's Gantt segments, stored when it ends, so the
replay Gantt draws any request of a recording of any size (app.db.request_segments)

Revision ID: 0009_request_segments
Revises: 0008_live_rows
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_request_segments"
down_revision = "0008_live_rows"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("requests", sa.Column("segments", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("requests", "segments")
