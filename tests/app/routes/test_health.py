"""GET /healthz against real faults: the engine stopped, a database the recorder cannot
write to (another connection holds SQLite's write lock), a PostgreSQL database that is
gone. 200 when all is well, 503 naming what is wrong."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg

from app.db import migrate
from tests.conftest import PG_ADMIN, LiveServer, fresh_pg_database, start_server


def _until(url: str, check: Callable[[httpx.Response], bool], timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.get(url + "/healthz", timeout=5)
        if check(r):
            return r.json()
        assert time.monotonic() < deadline, r.text
        time.sleep(0.1)


def _written_all(recorder: dict[str, Any]) -> bool:
    return bool(recorder["written"] >= 1 and recorder["lag"] == 0)


def test_healthy_then_the_engine_stops(live_server: LiveServer) -> None:
    r = httpx.get(live_server.url + "/healthz")
    body = r.json()
    assert r.status_code == 200 and body["status"] == "ok" and body["reason"] is None
    assert {name for name, c in body["checks"].items() if c["ok"]} == {
        "engine",
        "recorder",
        "database",
    }
    pid = httpx.get(live_server.url + "/api/engine").json()["pid"]
    os.kill(pid, signal.SIGSTOP)  # a hung engine process: alive, silent
    try:
        body = _until(live_server.url, lambda r: r.status_code == 503, timeout=30)
        assert body["reason"].startswith("engine: no word from the engine process")
    finally:
        os.kill(pid, signal.SIGCONT)
    body = _until(live_server.url, lambda r: r.status_code == 200, timeout=30)
    assert body["checks"]["engine"]["info"]["pid"] == pid


def test_recorder_lag_while_the_database_is_locked(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    migrate.upgrade(f"sqlite:///{db}")
    live, server, thread = start_server(
        database_url=f"sqlite:///{db}", health_recorder_max_lag_s=0.3
    )
    # The engine process's opening frames are written first.
    _until(live.url, lambda r: _written_all(r.json()["checks"]["recorder"]["info"]))
    lock = sqlite3.connect(db, isolation_level=None)
    try:
        lock.execute("BEGIN EXCLUSIVE")  # every write of the recorder waits, then fails
        with live.client() as c:
            c.post("/api/requests", json={"prompt_len": 16, "max_tokens": 4})
        body = _until(live.url, lambda r: r.status_code == 503)
        assert body["reason"].startswith("recorder: ")
        assert "frames not yet in the database, the oldest for" in body["reason"]
        assert body["checks"]["recorder"]["info"]["lag"] > 0
        assert body["checks"]["database"]["ok"]  # reading still works (WAL)
        lock.execute("COMMIT")
        body = _until(live.url, lambda r: r.status_code == 200, timeout=30)
        assert body["checks"]["recorder"]["info"]["lag"] == 0
    finally:
        lock.close()
        server.should_exit = True
        thread.join(10)


def test_a_database_that_is_gone() -> None:
    with fresh_pg_database() as url:
        migrate.upgrade(url)
        live, server, thread = start_server(database_url=url, relay="off")
        try:
            # Everything produced so far is written first (the engine's opening frames).
            _until(live.url, lambda r: _written_all(r.json()["checks"]["recorder"]["info"]))
            name = url.rsplit("/", 1)[1]
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
            body = _until(live.url, lambda r: r.status_code == 503)
            assert body["reason"].startswith("database: unreachable: ")
        finally:
            server.should_exit = True
            thread.join(10)
