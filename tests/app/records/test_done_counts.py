"""A recording's done counts (app.db.done_counts) are kept by the writer as it writes and
stored as they grow (every STORE_ROWS more done rows) and when it ends, through the step
before its last written one. A page's first ask reads them and counts on from there, a
recording being made or ended, a frame written after its end included; without them (a
recording made before them) they are read apart, on a connection of their own, from the
first ask on, then kept. Either way they equal counting the rows in the database at
every step, for every status, preempted or not, and known or unknown latency. On a
database of one shared connection they are read on the second ask, in the caller's
session. SQLite files and PostgreSQL."""

from __future__ import annotations

import random
import time
from collections.abc import Hashable, Iterator

import pytest
from sqlalchemy import delete, func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import done_counts as done_counts_module
from app.db import queries
from app.db.base import Base
from app.db.done_counts import DoneCounts, Scope, counts_scope, done_counts, stored
from app.db.models import DoneCountsRecord, SessionRecord
from app.db.models import RequestRecord as R
from app.db.session import make_engine, make_sessionmaker
from app.db.writes import Frame, write_batch
from protocol.envelope import encode, envelope
from tests.app.records.conftest import NewUrl, open_sessions
from tests.app.records.helpers import drive, record_session, settle, start_recording

SID = "s-done-counts"
LATE = "s-done-counts-late"
OLD = "s-done-counts-old"
STATUSES: list[frozenset[str | None] | None] = [
    None,
    frozenset({"FINISHED", None}),
    frozenset({"REJECTED"}),
]
KINDS = ("all", "ran", "idle", "+ttft", "-ttft", "+e2e", "-e2e")


def _in_database(
    db: Session,
    sid: str,
    step: int,
    statuses: frozenset[str | None] | None,
    preempted: bool | None,
    kind: str,
) -> int:
    where = [R.session_id == sid, R.finish_step.is_not(None), R.finish_step <= step]
    if statuses is not None:
        named = [s for s in statuses if s is not None]
        where.append(R.status.in_(named) | (R.status.is_(None) if None in statuses else False))
    if preempted is not None:
        where.append(R.num_preemptions > 0 if preempted else R.num_preemptions == 0)
    if kind == "ran":
        where.append(R.num_preemptions > 0)
    elif kind == "idle":
        where.append(R.num_preemptions == 0)
    elif kind != "all":
        column = R.ttft if kind[1:] == "ttft" else R.e2e
        where.append(column.is_not(None) if kind[0] == "+" else column.is_(None))
    return db.scalar(select(func.count()).select_from(R).where(*where)) or 0


def _assert_exact(
    sessions: sessionmaker[Session], counts: DoneCounts, sid: str = SID, upto: int | None = None
) -> None:
    """Equal to the database at steps through `upto` (None: the last, and past it)."""
    with sessions() as db:
        last = queries.get_session(db, sid)["steps"] - 1
        assert counts.count(last, None, None, "all") > 0
        steps = [-1, 0, last // 5, last // 2, last - 1, last, last + 10]
        if upto is not None:
            steps = [-1, 0, upto // 5, upto // 2, upto - 1, upto]
        for step in steps:
            for statuses in STATUSES:
                for preempted in (None, True, False):
                    for kind in KINDS:
                        want = _in_database(db, sid, step, statuses, preempted, kind)
                        got = counts.count(step, statuses, preempted, kind)
                        assert got == want, (step, statuses, preempted, kind)


def _scope(db: Session, sid: str, tag: str) -> Scope:
    """The scope a page asks with (counts_scope), its key told apart by `tag` and the
    time: nothing kept by another test answers."""
    scope = counts_scope(queries.get_session(db, sid))
    assert scope is not None
    return (scope[0], tag, time.monotonic()), scope[1]


@pytest.fixture(scope="module")
def recording(new_database: NewUrl) -> Iterator[sessionmaker[Session]]:
    """SID as recorded; LATE with a request rejected after it ended; OLD without stored
    counts (as a recording made before them)."""
    for sessions in open_sessions(new_database()):
        record_session(sessions, SID, steps=600, seed=5)
        record_session(sessions, LATE, steps=400, seed=7)
        record_session(sessions, OLD, steps=500, seed=8)
        with sessions.begin() as db:
            db.execute(delete(DoneCountsRecord).where(DoneCountsRecord.session_id == OLD))
        with sessions.begin() as db:
            rec = db.get(SessionRecord, LATE)
            assert rec is not None and db.get(DoneCountsRecord, LATE) is not None
            last_step = queries.get_session(db, LATE)["steps"] - 1
            data = {"req": "late-1", "kind": "rejected", "step": last_step, "t": 9.0,
                    "detail": {"reason": "late"}}  # fmt: skip
            seq = rec.last_seq + 1
            text = envelope("request", LATE, seq, encode(data))
            write_batch(db, [Frame(LATE, "request", seq, data, text)], [])
        yield sessions


def _arrivals_ok(db: Session, sid: str) -> bool:
    odd = select(R.req_id).where(
        R.session_id == sid,
        R.finish_step.is_not(None),
        or_(R.arrival_step.is_(None), R.arrival_step > R.finish_step),
    )
    return db.scalar(odd.limit(1)) is None


def test_stored_when_the_recording_ends_and_counted_on_at_the_first_ask(
    recording: sessionmaker[Session],
) -> None:
    with recording() as db:
        rec, row = db.get(SessionRecord, SID), db.get(DoneCountsRecord, SID)
        assert rec is not None and rec.ended_at is not None
        assert row is not None and row.last_seq == rec.last_seq
        last = rec.num_steps - 1
        kept = stored(db, SID)
        assert kept is not None and kept.upto == last - 1  # the rows final when it ended
        key, final = _scope(db, SID, "stored")
        assert final == last
        counts = done_counts(db, SID, key, final)
        assert counts is not None  # the first ask: from the stored row, counted on
        assert counts.upto == last
        assert counts.arrivals_ok(db) == _arrivals_ok(db, SID)
    _assert_exact(recording, kept, upto=last - 1)  # what the writer stored
    _assert_exact(recording, counts)


def test_a_frame_written_after_the_end_is_counted_on_from_the_stored_counts(
    recording: sessionmaker[Session],
) -> None:
    rejected = frozenset({"REJECTED"})
    with recording() as db:
        kept = stored(db, LATE)
        assert kept is not None
        key, final = _scope(db, LATE, "late")
        assert kept.upto == final - 1  # late-1 was rejected at the last step, after them
        counts = done_counts(db, LATE, key, final)
        assert counts is not None and counts.upto == final
        assert counts.count(final, rejected, None, "all") == (
            kept.count(final, rejected, None, "all") + 1
        )
    _assert_exact(recording, counts, LATE)  # late-1 among the rejected


def test_without_stored_counts_they_are_read_apart_from_the_first_ask_then_kept_and_exact(
    recording: sessionmaker[Session],
) -> None:
    with recording() as db:
        key, final = _scope(db, OLD, "read apart")
        assert done_counts(db, OLD, key, final) is None  # the read starts; count in the database
    counts = _when_read(recording, OLD, key, final)
    with recording() as db:
        assert done_counts(db, OLD, key, final) is counts  # kept
        assert counts.arrivals_ok(db) == _arrivals_ok(db, OLD)
    _assert_exact(recording, counts, OLD)


def _when_read(sessions: sessionmaker[Session], sid: str, key: Hashable, final: int) -> DoneCounts:
    counts = None
    deadline = time.monotonic() + 60
    while counts is None and time.monotonic() < deadline:
        with sessions() as db:
            counts = done_counts(db, sid, key, final)
        time.sleep(0.01)
    assert counts is not None, "the counts were not read apart within 60 s"
    return counts


def test_being_made_the_writer_stores_them_as_they_grow_and_a_page_counts_on(
    new_database: NewUrl, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recording still being made: its rows are final through the step before its
    last written one. The writer stores its counts every STORE_ROWS more done rows (at a
    checkpoint); a page's first ask counts on from them to there, and on again (the new
    rows only) as the recording grows."""
    monkeypatch.setattr(done_counts_module, "STORE_ROWS", 16)  # the writer runs here
    sid = "s-done-counts-open"
    for sessions in open_sessions(new_database()):
        hub, recorder, engine = start_recording(sessions, sid)
        rng = random.Random(9)
        drive(engine, 300, rng)
        settle(recorder)
        with sessions() as db:
            first = stored(db, sid)
            assert first is not None, "not stored while being made"
            key, final = _scope(db, sid, "being made")
            assert final == queries.get_session(db, sid)["steps"] - 2
            assert 0 <= first.upto <= final
            counts = done_counts(db, sid, key, final)
            assert counts is not None  # the first ask: from the stored row, counted on
        assert counts.upto == final
        _assert_exact(sessions, first, sid, upto=first.upto)  # what the writer stored
        _assert_exact(sessions, counts, sid, upto=final)
        runs = counts.runs
        drive(engine, 300, rng, first=300)
        settle(recorder)
        with sessions() as db:
            later = queries.get_session(db, sid)["steps"] - 2
            assert later > final
            assert done_counts(db, sid, key, later) is counts  # counted on, in place
            grown = stored(db, sid)
            assert grown is not None and first.upto < grown.upto <= later
        assert counts.upto == later and counts.runs is not runs
        _assert_exact(sessions, counts, sid, upto=later)
        _assert_exact(sessions, grown, sid, upto=grown.upto)
        hub.close_session(sid)
        settle(recorder)
        with sessions() as db:
            rec, row, ended = (
                db.get(SessionRecord, sid),
                db.get(DoneCountsRecord, sid),
                stored(db, sid),
            )
            assert rec is not None and row is not None and ended is not None
            assert row.last_seq == rec.last_seq and ended.upto == rec.num_steps - 2


def test_one_shared_connection_reads_them_on_the_second_ask() -> None:
    engine = make_engine("sqlite://")
    Base.metadata.create_all(engine)
    try:
        sessions = make_sessionmaker(engine)
        record_session(sessions, SID, steps=300, seed=6)
        with sessions.begin() as db:  # as a recording made before counts were stored
            db.execute(delete(DoneCountsRecord))
        with sessions() as db:
            key, final = _scope(db, SID, "shared")
            assert done_counts(db, SID, key, final) is None
            counts = done_counts(db, SID, key, final)  # read here, in this session
            assert counts is not None
        _assert_exact(sessions, counts)
    finally:
        engine.dispose()
