"""An ended recording's done counts (app.db.done_counts) are read apart, on a connection of
their own, from the first ask on, then kept; they equal counting the rows in the database
at every step, for every status, preempted or not, and known or unknown latency. On a
database of one shared connection they are read on the second ask, in the caller's
session. SQLite files and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import queries
from app.db.base import Base
from app.db.done_counts import DoneCounts, done_counts
from app.db.models import RequestRecord as R
from app.db.session import make_engine, make_sessionmaker
from tests.app.records.conftest import NewUrl, open_sessions
from tests.app.records.helpers import record_session

SID = "s-done-counts"
STATUSES: list[frozenset[str | None] | None] = [
    None,
    frozenset({"FINISHED", None}),
    frozenset({"REJECTED"}),
]
KINDS = ("all", "ran", "idle", "+ttft", "-ttft", "+e2e", "-e2e")


def _in_database(
    db: Session,
    step: int,
    statuses: frozenset[str | None] | None,
    preempted: bool | None,
    kind: str,
) -> int:
    where = [R.session_id == SID, R.finish_step.is_not(None), R.finish_step <= step]
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


def _assert_exact(sessions: sessionmaker[Session], counts: DoneCounts) -> None:
    with sessions() as db:
        last = queries.get_session(db, SID)["steps"] - 1
        assert counts.count(last, None, None, "all") > 0
        for step in (-1, 0, last // 5, last // 2, last - 1, last, last + 10):
            for statuses in STATUSES:
                for preempted in (None, True, False):
                    for kind in KINDS:
                        want = _in_database(db, step, statuses, preempted, kind)
                        got = counts.count(step, statuses, preempted, kind)
                        assert got == want, (step, statuses, preempted, kind)


@pytest.fixture(scope="module")
def recording(new_database: NewUrl) -> Iterator[sessionmaker[Session]]:
    for sessions in open_sessions(new_database()):
        record_session(sessions, SID, steps=600, seed=5)
        yield sessions


def test_read_apart_from_the_first_ask_then_kept_and_exact(
    recording: sessionmaker[Session],
) -> None:
    ended = ("read apart", time.monotonic())
    with recording() as db:
        assert done_counts(db, SID, ended) is None  # the read starts; count in the database
    counts = None
    deadline = time.monotonic() + 60
    while counts is None and time.monotonic() < deadline:
        with recording() as db:
            counts = done_counts(db, SID, ended)
        time.sleep(0.01)
    assert counts is not None, "the counts were not read apart within 60 s"
    with recording() as db:
        assert done_counts(db, SID, ended) is counts  # kept
    _assert_exact(recording, counts)


def test_one_shared_connection_reads_them_on_the_second_ask() -> None:
    engine = make_engine("sqlite://")
    Base.metadata.create_all(engine)
    try:
        sessions = make_sessionmaker(engine)
        record_session(sessions, SID, steps=300, seed=6)
        ended = ("shared", time.monotonic())
        with sessions() as db:
            assert done_counts(db, SID, ended) is None
            counts = done_counts(db, SID, ended)  # read here, in this session
            assert counts is not None
        _assert_exact(sessions, counts)
    finally:
        engine.dispose()
