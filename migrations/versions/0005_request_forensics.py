"""step_waits: the numbers behind each recorded step's waiting reasons

Revision ID: 0005_request_forensics
Revises: 0004_issue12_faults
Create Date: 2026-11-30 19:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0005_request_forensics'
down_revision = '0004_issue12_faults'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('step_waits',
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('detail', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['session_id'], ['sessions.id'], name=op.f('fk_step_waits_session_id_sessions'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('session_id', 'step', name=op.f('pk_step_waits'))
    )


def downgrade() -> None:
    op.drop_table('step_waits')
