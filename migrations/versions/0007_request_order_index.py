"""requests: the arrival index holds the whole default order (arrival step, arrival seq,
request id) and the finish step, so a recording's table pages in that order (either
direction) by walking the index, never sorting every done row

Revision ID: 0007_request_order_index
Revises: 0006_request_pages
Create Date: 2026-12-02 04:00:00
"""

from __future__ import annotations

from alembic import op

revision = '0007_request_order_index'
down_revision = '0006_request_pages'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index('ix_requests_session_arrival', table_name='requests')
    op.create_index(
        'ix_requests_session_order',
        'requests',
        ['session_id', 'arrival_step', 'arrival_seq', 'req_id', 'finish_step'],
    )


def downgrade() -> None:
    op.drop_index('ix_requests_session_order', table_name='requests')
    op.create_index(
        'ix_requests_session_arrival', 'requests', ['session_id', 'arrival_step', 'arrival_seq']
    )
