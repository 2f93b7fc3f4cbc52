"""An ended recording's done counts (app.db.done_counts) are stored by the writer when it
ends and read from there at the first ask; without them (stale: a frame written after
them; or none: a recording made before them) they are read apart, on a connection of
their own, from the first ask on, then kept. Either way they equal counting the rows in
the database at every step, for every status, preempted or not, and known or unknown
latency. On a database of one shared connection they are read on the second ask, in the
caller's session. SQLite files and PostgreSQL."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import delete, func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import queries
from app.db.base import Base
from app.db.done_counts import DoneCounts, done_counts
from app.db.models import DoneCountsRecord, SessionRecord
from app.db.models import RequestRecord as R
from app.db.session import make_engine, make_sessionmaker
from app.db.writes import Frame, write_batch
from protocol.envelope import encode, envelope
from tests.app.records.conftest import NewUrl, open_sessions
from tests.app.records.helpers import drive, record_session, settle, start_recording

SID = "s-done-counts"
LATE = "s-done-counts-late"
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


@pytest.fixture(scope="module")
def recording(new_database: NewUrl) -> Iterator[sessionmaker[Session]]:
    """SID as recorded; LATE with a request rejected after it ended (its stored counts
    stale)."""
    for sessions in open_sessions(new_database()):
        record_session(sessions, SID, steps=600, seed=5)
        record_session(sessions, LATE, steps=400, seed=7)
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


def test_stored_when_the_recording_ends_and_read_at_the_first_ask(
    recording: sessionmaker[Session],
) -> None:
    with recording() as db:
        rec, stored = db.get(SessionRecord, SID), db.get(DoneCountsRecord, SID)
        assert rec is not None and rec.ended_at is not None
        assert stored is not None and stored.last_seq == rec.last_seq
        counts = done_counts(db, SID, ("stored", time.monotonic()))
        assert counts is not None  # the first ask: from the stored row
        assert counts.arrivals_ok(db) == _arrivals_ok(db, SID)
    _assert_exact(recording, counts)


def test_stale_counts_are_read_apart_from_the_first_ask_then_kept_and_exact(
    recording: sessionmaker[Session],
) -> None:
    ended = ("read apart", time.monotonic())
    with recording() as db:
        assert done_counts(db, LATE, ended) is None  # the read starts; count in the database
    counts = None
    deadline = time.monotonic() + 60
    while counts is None and time.monotonic() < deadline:
        with recording() as db:
            counts = done_counts(db, LATE, ended)
        time.sleep(0.01)
    assert counts is not None, "the counts were not read apart within 60 s"
    with recording() as db:
        assert done_counts(db, LATE, ended) is counts  # kept
        assert counts.arrivals_ok(db) == _arrivals_ok(db, LATE)
    _assert_exact(recording, counts, LATE)  # late-1 among the rejected


def _when_read(
    sessions: sessionmaker[Session], sid: str, key: tuple[str, float], final: int
) -> DoneCounts:
    counts = None
    deadline = time.monotonic() + 60
    while counts is None and time.monotonic() < deadline:
        with sessions() as db:
            counts = done_counts(db, sid, key, final)
        time.sleep(0.01)
    assert counts is not None, "the counts were not read apart within 60 s"
    return counts


def test_being_made_they_count_through_the_final_step_and_count_on(
    new_database: NewUrl,
) -> None:
    """A recording still being made: its rows are final through the step before its
    last written one; the counts go that far, and count on (the new rows only) as the
    recording grows."""
    sid = "s-done-counts-open"
    for sessions in open_sessions(new_database()):
        hub, recorder, engine = start_recording(sessions, sid)
        rng = random.Random(9)
        drive(engine, 300, rng)
        settle(recorder)
        key = ("being made", time.monotonic())
        with sessions() as db:
            final = queries.get_session(db, sid)["steps"] - 2
            assert done_counts(db, sid, key, final) is None  # read apart
        counts = _when_read(sessions, sid, key, final)
        assert counts.upto == final
        _assert_exact(sessions, counts, sid, upto=final)
        runs = counts.runs
        drive(engine, 300, rng, first=300)
        settle(recorder)
        with sessions() as db:
            later = queries.get_session(db, sid)["steps"] - 2
            assert later > final
            assert done_counts(db, sid, key, later) is counts  # counted on, in place
        assert counts.upto == later and counts.runs is not runs
        _assert_exact(sessions, counts, sid, upto=later)
        hub.close_session(sid)
        settle(recorder)


def test_one_shared_connection_reads_them_on_the_second_ask() -> None:
    engine = make_engine("sqlite://")
    Base.metadata.create_all(engine)
    try:
        sessions = make_sessionmaker(engine)
        record_session(sessions, SID, steps=300, seed=6)
        with sessions.begin() as db:  # as a recording made before counts were stored
            db.execute(delete(DoneCountsRecord))
        ended = ("shared", time.monotonic())
        with sessions() as db:
            assert done_counts(db, SID, ended) is None
            counts = done_counts(db, SID, ended)  # read here, in this session
            assert counts is not None
        _assert_exact(sessions, counts)
    finally:
        engine.dispose()
