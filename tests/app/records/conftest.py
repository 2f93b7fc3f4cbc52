"""Both backends for real: SQLite files and the PostgreSQL server on 127.0.0.1:5432.

`database_url` is a fresh, migrated database on each backend. PostgreSQL databases
(`bs_test_<random>`) are created through the `postgres` database and all dropped at the end
of the run. Without a reachable server the PostgreSQL cases skip, except under CI
(env CI set), where that is a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.db.migrate import upgrade
from app.db.session import make_engine, make_sessionmaker

PG_ADMIN = os.environ.get(
    "BATCHSCOPE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)
NewUrl = Callable[[], str]


def _pg_unreachable() -> str | None:
    import psycopg

    try:
        with psycopg.connect(PG_ADMIN, connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return f"PostgreSQL is not reachable at {PG_ADMIN}: {exc}".strip()


class PostgresDatabases:
    """Creates migrated `bs_test_*` databases; drops them all at the end."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def create_empty(self) -> str:
        """A new empty database; returns its name."""
        import psycopg

        name = "bs_test_" + uuid.uuid4().hex[:12]
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        self.names.append(name)
        return name

    def new_url(self) -> str:
        url = PG_ADMIN.rsplit("/", 1)[0] + "/" + self.create_empty()
        upgrade(url)
        return url

    def drop_all(self) -> None:
        import psycopg

        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            for name in self.names:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def new_database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NewUrl]:
    """A factory of fresh, migrated database URLs on one backend."""
    if request.param == "sqlite":
        root = tmp_path_factory.mktemp("sqlite")

        def new_sqlite() -> str:
            url = f"sqlite:///{root / (uuid.uuid4().hex[:8] + '.db')}"
            upgrade(url)
            return url

        yield new_sqlite
        return
    reason = _pg_unreachable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(reason + " (CI must run the PostgreSQL tests)")
        pytest.skip(reason)
    databases = PostgresDatabases()
    try:
        yield databases.new_url
    finally:
        databases.drop_all()


@pytest.fixture
def database_url(new_database: NewUrl) -> str:
    return new_database()


def open_sessions(url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(url)
    try:
        yield make_sessionmaker(engine)
    finally:
        engine.dispose()


@pytest.fixture
def sessions(database_url: str) -> Iterator[sessionmaker[Session]]:
    yield from open_sessions(database_url)


@pytest.fixture(scope="session")
def recorded(new_database: NewUrl) -> Iterator[tuple[sessionmaker[Session], str]]:
    """One recording per backend, shared by all tests (they only read it)."""
    from tests.app.records.helpers import record_session

    for sessions in open_sessions(new_database()):
        record_session(sessions, "s-recorded-1", steps=700)
        yield sessions, "s-recorded-1"


@pytest.fixture
def other_sessions(new_database: NewUrl) -> Iterator[sessionmaker[Session]]:
    """A second fresh database on the same backend (the import side of a round trip)."""
    yield from open_sessions(new_database())
