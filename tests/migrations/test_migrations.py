"""Migrations upgrade from empty and downgrade on both backends; models == migrations."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from app.db.base import Base
from app.db.migrate import current_revision, downgrade, head_revision, upgrade
from app.db.session import make_engine

TABLES = {
    "sessions", "iterations", "events", "requests", "config_changes", "checkpoints",
    "lab_sweeps", "lab_points",
}  # fmt: skip


def test_upgrade_then_downgrade_and_no_model_drift(database_url: str) -> None:
    assert current_revision(database_url) is None
    upgrade(database_url)
    assert current_revision(database_url) == head_revision()
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            assert set(inspect(conn).get_table_names()) >= TABLES
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
            assert diff == [], diff
        downgrade(database_url)
        with engine.connect() as conn:
            assert not TABLES & set(inspect(conn).get_table_names())
        assert current_revision(database_url) is None
        upgrade(database_url)
        assert current_revision(database_url) == head_revision()
    finally:
        engine.dispose()
