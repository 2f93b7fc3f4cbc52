"""Export -> import into a fresh database gives the same recording: byte-identical frames,
the same request rows, session row and checkpoints, and the same state at any step."""

from __future__ import annotations

import io
import itertools
import json
import random
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import queries
from app.db.done_counts import counts_scope, done_counts, stored
from app.db.models import CheckpointRecord, LiveRowsRecord
from app.records.export import export_jsonl
from app.records.importer import import_jsonl
from app.records.recorder import CHECKPOINT_EVERY
from tests.app.records.conftest import PostgresDatabases, open_sessions
from tests.app.records.helpers import record_session

Recorded = tuple[sessionmaker[Session], str]


def _export(sessions: sessionmaker[Session], sid: str) -> str:
    out = io.StringIO()
    with sessions() as db:
        export_jsonl(db, sid, out)
    return out.getvalue()


def _checkpoints(sessions: sessionmaker[Session], sid: str) -> list[tuple[int, int, str]]:
    with sessions() as db:
        rows = db.execute(
            select(CheckpointRecord.seq, CheckpointRecord.step, CheckpointRecord.state)
            .where(CheckpointRecord.session_id == sid)
            .order_by(CheckpointRecord.seq)
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]


def _assert_same_recording(
    a: sessionmaker[Session], b: sessionmaker[Session], sid: str, rng: random.Random
) -> None:
    with a() as da, b() as db_:
        assert list(queries.iter_frames(da, sid)) == list(queries.iter_frames(db_, sid))
        # Sorted by id: rejected requests (no arrival step) sort first on SQLite, last on
        # PostgreSQL (NULL ordering), which is not a difference in the rows.
        rows_a = sorted(queries.request_rows(da, sid), key=lambda r: r["req_id"])
        assert rows_a == sorted(queries.request_rows(db_, sid), key=lambda r: r["req_id"])
        if a.kw["bind"].dialect.name == b.kw["bind"].dialect.name:
            assert queries.request_rows(da, sid) == queries.request_rows(db_, sid)
        assert queries.get_session(da, sid) == queries.get_session(db_, sid)
        last = queries.get_session(da, sid)["steps"] - 1
        for step in [0, last, *rng.sample(range(last), 12)]:
            sa, sb = queries.state_at_step(da, sid, step), queries.state_at_step(db_, sid, step)
            assert sa.snapshot() == sb.snapshot(), step
            assert sa.latency_summary() == sb.latency_summary(), step
        # The import stores the done counts the writer stored when the recording ended.
        sa, sb = stored(da, sid), stored(db_, sid)
        assert sa is not None and sb is not None
        assert (sa.upto, sa.runs) == (sb.upto, sb.runs) and sa.upto == last - 1
        assert sa.arrivals_ok(da) == sb.arrivals_ok(db_)
        scope = counts_scope(queries.get_session(da, sid))
        assert scope is not None
        key = (scope[0], "roundtrip", rng.random())
        ca, cb = done_counts(da, sid, key, scope[1]), done_counts(db_, sid, key, scope[1])
        assert ca is not None and cb is not None and ca.runs == cb.runs


def _assert_import_checkpoints(
    original: sessionmaker[Session], imported: sessionmaker[Session], sid: str, frames: int
) -> None:
    """The import checkpoints on the recorder's schedule (CheckpointClock: between
    CHECKPOINT_EVERY and 2x that many frames apart); where both have one, it is the same
    state, byte for byte."""
    ours = _checkpoints(imported, sid)
    seqs = [0] + [seq for seq, _, _ in ours]
    gaps = [b - a for a, b in itertools.pairwise(seqs)]
    assert gaps and all(CHECKPOINT_EVERY <= g <= 2 * CHECKPOINT_EVERY for g in gaps), gaps
    assert frames - seqs[-1] <= 2 * CHECKPOINT_EVERY
    assert len(ours) >= 2
    theirs = {seq: (step, state) for seq, step, state in _checkpoints(original, sid)}
    common = [(step, state) for seq, step, state in ours if seq in theirs]
    assert common and common == [theirs[seq] for seq, _, _ in ours if seq in theirs]


def test_export_import_round_trip_is_identical(
    recorded: Recorded, other_sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    sessions, sid = recorded
    text = _export(sessions, sid)
    lines = text.splitlines()
    header = json.loads(lines[0])
    assert header["batchscope"] == 1 and header["session"]["id"] == sid
    assert header["session"]["meta"]["name"] == "records test"
    assert header["session"]["config"]["max_num_seqs"] == 8
    with sessions() as db:
        assert lines[1:] == [t for _, t in queries.iter_frames(db, sid)]
    kinds = {json.loads(line)["type"] for line in lines[1:]}
    assert kinds == {"session", "iteration", "request", "config"}

    path = tmp_path / "rec.jsonl"
    path.write_text(text, encoding="utf-8")
    assert import_jsonl(other_sessions, path) == sid
    _assert_same_recording(sessions, other_sessions, sid, random.Random(1))
    _assert_import_checkpoints(sessions, other_sessions, sid, len(lines) - 1)
    # The request table's live rows too: taken at the same step ends, the same rows.
    assert _live_rows(other_sessions, sid) == _live_rows(sessions, sid) != []
    assert _export(other_sessions, sid) == text  # byte-identical, header included


def _live_rows(sessions: sessionmaker[Session], sid: str) -> list[tuple[int, int, str]]:
    with sessions() as db:
        rows = db.execute(
            select(LiveRowsRecord.seq, LiveRowsRecord.step, LiveRowsRecord.state)
            .where(LiveRowsRecord.session_id == sid)
            .order_by(LiveRowsRecord.seq)
        )
        return [tuple(r) for r in rows]


def test_renamed_session_keeps_its_name_and_end(
    sessions: sessionmaker[Session], other_sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    record_session(sessions, "s-renamed", steps=40)
    with sessions.begin() as db:
        queries.rename_session(db, "s-renamed", "after the rename")
    path = tmp_path / "renamed.jsonl"
    path.write_text(_export(sessions, "s-renamed"), encoding="utf-8")
    import_jsonl(other_sessions, path)
    with sessions() as a, other_sessions() as b:
        row = queries.get_session(b, "s-renamed")
        assert row == queries.get_session(a, "s-renamed")
        assert row["name"] == "after the rename" and row["ended_at"] is not None


def test_sqlite_export_imports_into_postgresql(tmp_path: Path) -> None:
    from tests.app.records.conftest import _pg_unreachable

    if (reason := _pg_unreachable()) is not None:
        pytest.skip(reason)
    from app.db.migrate import upgrade

    sqlite_url = f"sqlite:///{tmp_path / 'src.db'}"
    upgrade(sqlite_url)
    databases = PostgresDatabases()
    try:
        pg_url = databases.new_url()
        for src in open_sessions(sqlite_url):
            record_session(src, "s-cross", steps=120, seed=3)
            path = tmp_path / "cross.jsonl"
            path.write_text(_export(src, "s-cross"), encoding="utf-8")
            for dst in open_sessions(pg_url):
                import_jsonl(dst, path)
                _assert_same_recording(src, dst, "s-cross", random.Random(2))
                assert _export(dst, "s-cross") == path.read_text(encoding="utf-8")
    finally:
        databases.drop_all()
