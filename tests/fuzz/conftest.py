"""A real server for the fuzz tests (module-wide): on PostgreSQL when it is reachable (where
NUL bytes and 64-bit integers bit before), else a SQLite file; with a live engine busy so
that control routes and sockets have something to act on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.db.migrate import upgrade
from tests.conftest import LiveServer, _pg_available, fresh_pg_database, start_server


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    def serve(url: str) -> Iterator[LiveServer]:
        upgrade(url)
        live, srv, thread = start_server(database_url=url, workload="poisson")
        yield live
        srv.should_exit = True
        thread.join(10)

    if _pg_available():
        with fresh_pg_database() as url:
            yield from serve(url)
    else:
        yield from serve(f"sqlite:///{Path(tmp_path_factory.mktemp('fuzz')) / 'fuzz.db'}")
