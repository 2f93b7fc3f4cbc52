"""requests: arrival_seq, status, ttft, e2e and indexes, so a recording's request table
pages, filters and sorts in the database at any size

Revision ID: 0006_request_pages
Revises: 0005_request_forensics
Create Date: 2026-12-02 03:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006_request_pages'
down_revision = '0005_request_forensics'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('requests') as batch:
        batch.add_column(sa.Column('arrival_seq', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('status', sa.String(length=16), nullable=True))
        batch.add_column(sa.Column('ttft', sa.Float(), nullable=True))
        batch.add_column(sa.Column('e2e', sa.Float(), nullable=True))
    # Rows recorded before: what their columns already say (rejections cannot be told
    # from aborts there; their arrival order within a step falls back to the request id).
    op.execute(
        "UPDATE requests SET status = 'FINISHED', "
        "e2e = CASE WHEN arrival_t IS NOT NULL THEN finish_t - arrival_t END "
        "WHERE finish_step IS NOT NULL"
    )
    op.execute("UPDATE requests SET arrival_seq = 0 WHERE arrival_seq IS NULL")
    op.execute(
        "UPDATE requests SET ttft = first_token_t - arrival_t "
        "WHERE first_token_t IS NOT NULL AND arrival_t IS NOT NULL"
    )
    op.create_index('ix_requests_session_finish', 'requests', ['session_id', 'finish_step'])
    op.create_index(
        'ix_requests_session_arrival', 'requests', ['session_id', 'arrival_step', 'arrival_seq']
    )
    op.create_index('ix_requests_session_ttft', 'requests', ['session_id', 'ttft'])
    op.create_index('ix_requests_session_e2e', 'requests', ['session_id', 'e2e'])


def downgrade() -> None:
    op.drop_index('ix_requests_session_e2e', table_name='requests')
    op.drop_index('ix_requests_session_ttft', table_name='requests')
    op.drop_index('ix_requests_session_arrival', table_name='requests')
    op.drop_index('ix_requests_session_finish', table_name='requests')
    with op.batch_alter_table('requests') as batch:
        batch.drop_column('e2e')
        batch.drop_column('ttft')
        batch.drop_column('status')
        batch.drop_column('arrival_seq')
