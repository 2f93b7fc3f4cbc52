"""Engine + sessionmaker from a URL. SQLite gets WAL and foreign keys on each connection."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

BUSY_TIMEOUT_S = 30.0
"""How long a SQLite connection waits for another's write lock before "database is locked".
The recorder's writer process takes the lock for each batch; on a loaded box it can come
back for it again and again, and pysqlite's default of 5 s then failed the lab's writes
(a sweep ended "failed" mid-run)."""

IMMEDIATE = "batchscope_sqlite_immediate"
"""Execution option: this transaction writes, so on SQLite it takes the write lock up front."""


def normalize_url(url: str) -> str:
    """postgresql:// means psycopg 3 here (the driver we ship)."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def make_engine(url: str, writer: bool = False) -> Engine:
    url = normalize_url(url)
    parsed = make_url(url)
    kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        else:
            # One shared connection, or every connection would see its own empty database.
            kwargs["poolclass"] = StaticPool
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": BUSY_TIMEOUT_S}
    else:
        kwargs["pool_pre_ping"] = True
    engine = create_engine(url, **kwargs)
    if parsed.get_backend_name() == "sqlite":
        file_backed = bool(database) and database != ":memory:"

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            # SQLAlchemy, not pysqlite, says when a transaction begins: SAVEPOINTs (the
            # recorder isolates a bad frame with them) then nest inside a real BEGIN. Not
            # for an in-memory database: its one connection is shared by every thread
            # (StaticPool), where explicit BEGINs of two sessions would collide.
            if file_backed:
                dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            if database and database != ":memory:":
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        if file_backed:
            # The recorder's writer takes the write lock up front: waiting out a busy
            # database (the busy timeout) instead of failing at once when a read inside its
            # transaction cannot be upgraded to a write.
            begin = "BEGIN IMMEDIATE" if writer else "BEGIN"

            @event.listens_for(engine, "begin")
            def _sqlite_begin(conn: Any) -> None:
                immediate = conn.get_execution_options().get(IMMEDIATE, False)
                conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else begin)

    return engine


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def write_transaction(db: sessionmaker[Session]) -> Iterator[Session]:
    """`db.begin()` for a transaction that reads and then writes. On a SQLite file shared
    with the recorder's writer process, a plain (deferred) transaction that has read cannot
    take the write lock once the writer has committed since: it fails at once with
    "database is locked", busy timeout or not. Taking the lock up front waits it out
    instead. Other databases are unaffected (the option means nothing to them)."""
    with db.begin() as s:
        s.connection(execution_options={IMMEDIATE: True})
        yield s
