"""A private database for `--database-url sqlite://`: a temporary SQLite file, not an
in-memory one.

An in-memory SQLite database is one connection, and the server has several threads that
write (the recorder, the lab, web requests): sharing one connection, their transactions
and savepoints interleave ("no such savepoint", "cannot rollback - no transaction is
active"). A file in a private temporary folder gives every thread its own connection with
SQLite's own locking (WAL, busy timeout), exactly as the default `serve` database does,
and is removed with the folder when the server stops. Nothing of it outlives the process,
which is what `sqlite://` promises."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.db.migrate import is_memory_url, require_migrated, upgrade
from app.db.session import make_engine, make_sessionmaker


class ServingDatabase:
    """The URL the server uses for `database_url`: the same URL, or for an in-memory one a
    migrated temporary file (`private` True) that `remove` deletes."""

    def __init__(self, database_url: str) -> None:
        self.private = is_memory_url(database_url)
        self._folder: Path | None = None
        self._engines: list[Engine] = []
        if not self.private:
            self.url = database_url
            return
        self._folder = Path(tempfile.mkdtemp(prefix="batchscope-private-"))
        self.url = f"sqlite:///{self._folder / 'private.db'}"

    def prepare(self) -> None:
        """A private database is migrated here (nothing could have migrated it before);
        any other must already be (`batchscope db upgrade`, or `serve --migrate`)."""
        if self.private:
            upgrade(self.url)
        else:
            require_migrated(self.url)

    def sessions(self, writer: bool = False) -> sessionmaker[Session]:
        """Sessions on a new engine (pool) of this database, disposed by `remove`. A
        `writer` takes SQLite's write lock up front: the recorder's, when it writes a
        private database in a thread of this process (as the writer process does for any
        other), so that the web's writes wait their turn."""
        engine = make_engine(self.url, writer=writer)
        self._engines.append(engine)
        return make_sessionmaker(engine)

    def remove(self) -> None:
        """Close every engine `sessions` made; a private database's folder goes too."""
        for engine in self._engines:
            engine.dispose()
        self._engines.clear()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
