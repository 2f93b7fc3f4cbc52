"""Run Alembic migrations programmatically (`batchscope db upgrade`, tests, make run)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

from app.resources import asset_path


def alembic_config(database_url: str) -> Config:
    cfg = Config(str(asset_path("alembic.ini")))
    cfg.set_main_option("script_location", str(asset_path("migrations")))
    cfg.attributes["database_url"] = database_url
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)


def current_revision(database_url: str) -> str | None:
    from alembic.runtime.migration import MigrationContext

    from app.db.session import make_engine

    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def is_memory_url(database_url: str) -> bool:
    return database_url in ("sqlite://", "sqlite:///:memory:")


class NotMigrated(RuntimeError):
    """The database cannot be opened, or is not at the latest schema."""


def require_migrated(database_url: str) -> None:
    """The one check that a database may be served from or read: reachable and at head.
    Migrations are their own command (`batchscope db upgrade`), never run on the way."""
    try:
        revision = current_revision(database_url)
    except Exception as exc:  # a bad URL, an unreachable server
        raise NotMigrated(f"cannot open the database {database_url}: {exc}") from exc
    if revision != head_revision():
        raise NotMigrated(
            f"the database {database_url} is not at the latest schema: "
            "run `batchscope db upgrade` first (make run does)"
        )


def prepare(engine: Engine, database_url: str) -> None:
    """Before serving: a private in-memory database is migrated in place (nothing could
    have migrated it beforehand); any other must already be (require_migrated)."""
    if not is_memory_url(database_url):
        require_migrated(database_url)
        return
    with engine.begin() as conn:
        cfg = alembic_config(database_url)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
