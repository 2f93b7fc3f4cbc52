"""PostgreSQL plans a recording's queries from statistics the recorder's writer (and the
importer) keep current (app.db.planner_stats): a real engine recorded by a real Recorder
on a fresh PostgreSQL database (this machine's server runs without autovacuum, so nothing
else analyzes it). Once the recording ends, or is imported, the tables it grew are
analyzed, and the planner knows a session's requests are thousands, not the few of the
empty table it was created as (seeks then filtered every request of the session instead
of walking the primary key)."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from app.db.migrate import upgrade
from app.db.models import RequestRecord, SessionRecord
from app.db.planner_stats import MIN_CHANGED, PlannerStats
from app.records.export import export_jsonl
from app.records.importer import import_jsonl
from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.request import SamplingParams
from tests.app.records.conftest import PostgresDatabases, open_sessions
from tests.app.records.helpers import settle, start_recording

SID = "s-planner-1"
REQUESTS = 3000


@pytest.fixture
def pg_sessions(pg_url: str) -> Iterator[sessionmaker[Session]]:
    upgrade(pg_url)
    yield from open_sessions(pg_url)


def _record(sessions: sessionmaker[Session]) -> None:
    """REQUESTS short requests through a full batch: thousands of rows in requests,
    iterations and events."""
    config = EngineConfig(
        SchedulerConfig(max_num_batched_tokens=2048, max_num_seqs=128, max_model_len=256),
        CacheConfig(block_size=16, num_gpu_blocks=4096),
    ).validate()
    hub, recorder, engine = start_recording(sessions, SID, "planner", config)
    rng = random.Random(3)
    added = 0
    while added < REQUESTS or engine.scheduler.running or engine.scheduler.waiting:
        while added < REQUESTS and len(engine.scheduler.waiting) < 64:
            prompt = [rng.randint(3, 258) for _ in range(rng.randint(4, 40))]
            engine.add_request(f"r{added}", prompt, SamplingParams(max_tokens=rng.randint(1, 8)))
            added += 1
        engine.step()
    hub.close_session(SID)
    settle(recorder)


def _table_stats(sessions: sessionmaker[Session]) -> dict[str, tuple[Any, int, int]]:
    """table -> (last ANALYZE by a client, rows, rows changed since the last ANALYZE)."""
    query = "SELECT relname, last_analyze, n_live_tup, n_mod_since_analyze FROM pg_stat_user_tables"
    with sessions() as db:
        rows = db.execute(text(query)).all()
    return {name: (last, live, changed) for name, last, live, changed in rows}


def _estimate(sessions: sessionmaker[Session]) -> int:
    """PostgreSQL's estimate of the session's requests (what it plans a seek's lookups
    by: a few rows, and it filters them all rather than walk an index)."""
    explain = text("EXPLAIN (FORMAT JSON) SELECT * FROM requests WHERE session_id = :s")
    with sessions() as db:
        plan = db.execute(explain, {"s": SID}).scalar_one()
    return int((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]["Plan Rows"])


def test_the_tables_a_recording_grows_are_analyzed_as_it_ends(
    pg_sessions: sessionmaker[Session],
) -> None:
    assert _table_stats(pg_sessions)["requests"][0] is None  # a fresh database: never analyzed
    _record(pg_sessions)
    after = _table_stats(pg_sessions)
    grown = {name for name, (_, live, _) in after.items() if live >= MIN_CHANGED}
    assert "requests" in grown, after
    for name in grown:
        assert after[name][0] is not None, (name, after[name])
    estimate = _estimate(pg_sessions)
    assert 0.9 * REQUESTS <= estimate <= 1.1 * REQUESTS, estimate


def test_an_imported_recording_is_analyzed(
    pg_sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    _record(pg_sessions)
    path = tmp_path / "rec.jsonl"
    with pg_sessions() as db, path.open("w", encoding="utf-8") as out:
        export_jsonl(db, SID, out)
    databases = PostgresDatabases()
    try:
        for other in open_sessions(databases.new_url()):
            assert import_jsonl(other, path) == SID
            assert _table_stats(other)["requests"][0] is not None
            estimate = _estimate(other)
            assert 0.9 * REQUESTS <= estimate <= 1.1 * REQUESTS, estimate
    finally:
        databases.drop_all()


def _counted(sessions: sessionmaker[Session], table: str, changed: int) -> None:
    """Wait until PostgreSQL counts `changed` rows changed in `table` since its last
    ANALYZE (a backend publishes its counts when it exits, or within seconds: the pool's
    connections are closed first)."""
    engine = sessions.kw["bind"]
    engine.dispose()
    deadline = time.monotonic() + 60
    while True:
        now = _table_stats(sessions)[table][2]
        engine.dispose()
        if now >= changed:
            assert now == changed, (table, now, changed)
            return
        assert time.monotonic() < deadline, f"{table}: {now} of {changed} rows counted"
        time.sleep(0.1)


def test_a_table_is_analyzed_again_once_it_has_changed_as_many_rows_as_it_holds(
    pg_sessions: sessionmaker[Session],
) -> None:
    stats = PlannerStats(pg_sessions, check_every_s=3600.0)
    assert stats.enabled
    R = RequestRecord
    with pg_sessions.begin() as db:
        db.add(SessionRecord(id=SID, started_at=0.0))
        db.flush()
        db.add_all(
            R(
                session_id=SID,
                req_id=f"r{i}",
                num_prompt_tokens=8,
                max_tokens=4,
                priority=0,
                num_preemptions=0,
                prefix_hit_tokens=0,
                num_output_tokens=0,
            )
            for i in range(REQUESTS)
        )
    _counted(pg_sessions, "requests", REQUESTS)
    assert stats.tick() == ["requests"]  # the first check is due at once
    assert stats.tick() == []  # the next only after check_every_s
    assert stats.analyzed == 1
    assert _table_stats(pg_sessions)["requests"][2] == 0

    def touch(n: int) -> None:
        with pg_sessions.begin() as db:
            db.execute(
                text("UPDATE requests SET num_output_tokens = num_output_tokens + 1 "
                     "WHERE session_id = :s AND arrival_step IS NULL "
                     "AND req_id IN (SELECT req_id FROM requests ORDER BY req_id LIMIT :n)"),
                {"s": SID, "n": n},
            )  # fmt: skip

    touch(REQUESTS // 2)
    _counted(pg_sessions, "requests", REQUESTS // 2)
    assert stats.tick(now=True) == []  # half as many as it holds: not yet
    touch(REQUESTS // 2)
    _counted(pg_sessions, "requests", REQUESTS)
    assert stats.tick(now=True) == ["requests"]
    assert stats.analyzed == 2
