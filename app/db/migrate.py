"""Run Alembic migrations programmatically (`batchscope db upgrade`, tests, make run)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

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


def sqlite_file(database_url: str) -> Path | None:
    """The file of an embedded SQLite database; None for a server or an in-memory one."""
    if is_memory_url(database_url):
        return None
    try:
        url = make_url(database_url)
    except ArgumentError:
        return None
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database)


def display_url(database_url: str) -> str:
    """The URL as messages show it: without its password."""
    try:
        return make_url(database_url).render_as_string(hide_password=True)
    except ArgumentError:
        return database_url


class NotMigrated(RuntimeError):
    """The database cannot be opened, or is not at the latest schema."""


def require_migrated(database_url: str) -> None:
    """The one check that a database may be served from or read: reachable and at head.
    Never creates anything: a SQLite file that does not exist stays absent."""
    shown = display_url(database_url)
    path = sqlite_file(database_url)
    if path is not None and not _has_content(path):
        raise NotMigrated(
            f"there is no database at {path}: run `batchscope db upgrade --database-url "
            f"{shown}` (or `batchscope serve`, which creates it)"
        )
    revision = _revision(database_url)
    if revision != head_revision():
        raise NotMigrated(
            f"the database {shown} is at revision {revision or '(none)'}, not "
            f"{head_revision()}: run `batchscope db upgrade --database-url {shown}` first"
        )


def prepare_for_serving(database_url: str, migrate: bool) -> str | None:
    """What `serve` does before starting (Grafana's habit): a SQLite file that does not
    exist yet (or is empty) is created and migrated; a database at an older revision is
    migrated with `migrate`, else refused with the command to run. Returns what was done
    (for the log), None when nothing was needed. Refusing never leaves a file behind."""
    shown = display_url(database_url)
    path = sqlite_file(database_url)
    if path is not None and not _has_content(path):
        existed = path.exists()
        try:
            upgrade(database_url)
        except Exception as exc:
            if not existed:
                _remove_sqlite(path)
            raise NotMigrated(f"cannot create the database {path}: {exc}") from exc
        return f"created the SQLite database {path.resolve()} (schema {head_revision()})"
    revision = _revision(database_url)
    head = head_revision()
    if revision == head:
        return None
    if revision is not None and revision not in known_revisions():
        raise NotMigrated(
            f"the database {shown} is at revision {revision}, which this batchscope does "
            f"not know (written by a newer version?); refusing to serve from it"
        )
    if not migrate:
        raise NotMigrated(
            f"the database {shown} is at revision {revision or '(none)'}, not {head}: "
            f"run `batchscope db upgrade --database-url {shown}`, or start with "
            "`batchscope serve --migrate`"
        )
    upgrade(database_url)
    return f"migrated the database {shown} from revision {revision or '(none)'} to {head}"


def known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return {rev.revision for rev in script.walk_revisions()}


def _revision(database_url: str) -> str | None:
    try:
        return current_revision(database_url)
    except Exception as exc:  # a bad URL, an unreachable server
        raise NotMigrated(f"cannot open the database {display_url(database_url)}: {exc}") from exc


def _has_content(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def _remove_sqlite(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
