"""lab sweeps and their points

Revision ID: 0003_lab_sweeps
Revises: 0001
Create Date: 2026-12-06 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0003_lab_sweeps'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('lab_sweeps',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('experiment', sa.String(length=64), nullable=True),
    sa.Column('source', sa.JSON(), nullable=False),
    sa.Column('base', sa.JSON(), nullable=False),
    sa.Column('knobs', sa.JSON(), nullable=False),
    sa.Column('repeat', sa.Integer(), nullable=False),
    sa.Column('runner', sa.String(length=32), nullable=False),
    sa.Column('cost_model', sa.String(length=300), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('num_points', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=True),
    sa.Column('finished_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_lab_sweeps'))
    )
    op.create_table('lab_points',
    sa.Column('sweep_id', sa.String(length=64), nullable=False),
    sa.Column('point_index', sa.Integer(), nullable=False),
    sa.Column('knobs', sa.JSON(), nullable=False),
    sa.Column('repeat', sa.Integer(), nullable=False),
    sa.Column('metrics', sa.JSON(), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('session_id', sa.String(length=128), nullable=True),
    sa.ForeignKeyConstraint(['sweep_id'], ['lab_sweeps.id'], name=op.f('fk_lab_points_sweep_id_lab_sweeps'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('sweep_id', 'point_index', name=op.f('pk_lab_points'))
    )


def downgrade() -> None:
    op.drop_table('lab_points')
    op.drop_table('lab_sweeps')
