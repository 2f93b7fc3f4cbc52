"""issue 12: session end reasons, the recording process, session owners, frame blocks

Revision ID: 0004_issue12_faults
Revises: 0003_lab_sweeps
Create Date: 2026-11-30 18:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0004_issue12_faults'
down_revision = '0003_lab_sweeps'
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
    op.create_table('frame_blocks',
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('first_seq', sa.Integer(), nullable=False),
    sa.Column('last_seq', sa.Integer(), nullable=False),
    sa.Column('frames', sa.LargeBinary(), nullable=False),
    sa.ForeignKeyConstraint(['session_id'], ['sessions.id'], name=op.f('fk_frame_blocks_session_id_sessions'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('session_id', 'first_seq', name=op.f('pk_frame_blocks'))
    )
    op.create_index('ix_frame_blocks_session_last', 'frame_blocks', ['session_id', 'last_seq'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_frame_blocks_session_last', table_name='frame_blocks')
    op.drop_table('frame_blocks')
    op.drop_table('session_owners')
    with op.batch_alter_table('sessions') as batch:
        batch.drop_column('recorder')
        batch.drop_column('end_reason')
