"""issue 12: session end reasons, the recording process, session owners

Revision ID: 0002_issue12_faults
Revises: 0001
Create Date: 2026-11-30 18:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0002_issue12_faults'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('sessions') as batch:
        batch.add_column(sa.Column('end_reason', sa.String(length=16), nullable=True))
        batch.add_column(sa.Column('recorder', sa.String(length=128), nullable=True))
    op.create_table('session_owners',
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('key_hash', sa.String(length=64), nullable=False),
    sa.Column('node', sa.String(length=100), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('session_id', name=op.f('pk_session_owners'))
    )


def downgrade() -> None:
    op.drop_table('session_owners')
    with op.batch_alter_table('sessions') as batch:
        batch.drop_column('recorder')
        batch.drop_column('end_reason')
