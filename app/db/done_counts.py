"""The done requests of an ended recording counted at any step from one read: per status
and preempted-or-not, the finish steps and the running counts of rows, of rows with a
TTFT and of rows with an E2E (one walk of ix_requests_session_finish, no sort). A page of
the request table then counts its done rows at a new step without scanning them again
(app.db.request_page): the count of a big range was most of a seek's time.

Only for what those columns tell (status, preempted, a known or unknown sort value);
a query on priority, prefix hits or the id counts in the database as before.
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Hashable
from itertools import accumulate, groupby
from operator import itemgetter
from typing import NamedTuple

from sqlalchemy import Engine, func, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from app.db.models import RequestRecord

log = logging.getLogger("batchscope.db")
R = RequestRecord
KEPT = 8
"""Recordings whose counts are kept."""


class Run(NamedTuple):
    """One (status, preempted) group: its finish steps ascending, and the running
    counts of its rows, of those with a TTFT and of those with an E2E at each."""

    steps: list[int]
    rows: list[int]
    ttft: list[int]
    e2e: list[int]


class DoneCounts:
    def __init__(self, session_id: str, runs: dict[tuple[str | None, bool], Run]) -> None:
        self.session_id = session_id
        self.runs = runs
        self._arrivals_ok: bool | None = None

    def arrivals_ok(self, db: Session) -> bool:
        """Whether every done row arrived by its finish step (read once), so that the
        rows arrived by a step hold those done by it: what a piece holding done and
        pending rows counts (app.db.request_page's union)."""
        if self._arrivals_ok is None:
            odd = db.scalar(
                select(R.req_id)
                .where(
                    R.session_id == self.session_id,
                    R.finish_step.is_not(None),
                    or_(R.arrival_step.is_(None), R.arrival_step > R.finish_step),
                )
                .limit(1)
            )
            self._arrivals_ok = odd is None
        return self._arrivals_ok

    def count(
        self, step: int, statuses: frozenset[str | None] | None, preempted: bool | None, kind: str
    ) -> int:
        """Done rows by `step` (finish_step <= step) with a status in `statuses` (None:
        any), preempted or not (None: either), and `kind`: all | ran | idle (preempted
        or not) | ttft / e2e known (`+ttft`) or unknown (`-ttft`)."""
        total = 0
        for (status, ran), run in self.runs.items():
            if statuses is not None and status not in statuses:
                continue
            if preempted is not None and ran != preempted:
                continue
            if (kind == "ran" and not ran) or (kind == "idle" and ran):
                continue
            i = bisect_right(run.steps, step) - 1
            if i < 0:
                continue
            n = run.rows[i]
            if kind[1:] in ("ttft", "e2e"):
                known = (run.ttft if kind[1:] == "ttft" else run.e2e)[i]
                n = known if kind[0] == "+" else n - known
            total += n
        return total


_kept: OrderedDict[tuple[str, str, Hashable], DoneCounts] = OrderedDict()
_started: OrderedDict[tuple[str, str, Hashable], None] = OrderedDict()
_lock = threading.Lock()


def done_counts(db: Session, session_id: str, ended: Hashable) -> DoneCounts | None:
    """The counts of an ended recording (kept: its rows no longer change), or None while
    they are not read yet: the first ask starts reading them in a thread of its own, on a
    connection of its own, and the caller counts in the database meanwhile (one count
    costs less than the read). A replay's first seeks then no longer wait for the read
    (207 ms at 100,000 requests, in the second seek of a fresh process). A database of
    one shared connection (`sqlite://`, StaticPool) reads them on the second ask, in the
    caller's session: a thread beside it would share its transaction.
    `ended`: what tells this recording from another of the same id (deleted, then
    imported again), e.g. its start and end times."""
    bind = db.get_bind()
    key = (str(bind.engine.url), session_id, ended)
    shared = isinstance(bind.engine.pool, StaticPool)
    with _lock:
        if key in _kept:
            _kept.move_to_end(key)
            return _kept[key]
        if key not in _started:
            _started[key] = None
            while len(_started) > 4 * KEPT:
                _started.popitem(last=False)
            if not shared:
                reader = threading.Thread(
                    target=_read_apart, args=(bind.engine, key), name="done-counts", daemon=True
                )
                reader.start()
            return None
        if not shared:
            return None  # being read (or its read failed: counted in the database)
    return _keep(key, _read(db, session_id))


def _read_apart(engine: Engine, key: tuple[str, str, Hashable]) -> None:
    try:
        with Session(engine) as db:
            _keep(key, _read(db, key[1]))
    except Exception:  # the caller counts in the database as before
        log.warning("done counts of %s not read", key[1], exc_info=True)


def _keep(key: tuple[str, str, Hashable], counts: DoneCounts) -> DoneCounts:
    with _lock:
        _kept[key] = counts
        while len(_kept) > KEPT:
            _kept.popitem(last=False)
    return counts


def _read(db: Session, session_id: str) -> DoneCounts:
    ran = R.num_preemptions > 0
    stmt = (
        select(R.status, ran, R.finish_step, func.count(), func.count(R.ttft), func.count(R.e2e))
        .where(R.session_id == session_id, R.finish_step.is_not(None))
        .group_by(R.status, ran, R.finish_step)
        .order_by(R.status, ran, R.finish_step)
    )
    # One row per (status, preempted, finish step), grouped and sorted in the database;
    # each group's columns and running sums are made in C (zip, accumulate): a loop over
    # the rows in Python was 350 of the 600 ms this read took at 100,000 requests.
    runs: dict[tuple[str | None, bool], Run] = {}
    for (status, preempted), group in groupby(db.execute(stmt).all(), key=itemgetter(0, 1)):
        _, _, steps, rows, ttft, e2e = zip(*group, strict=True)
        runs[(status, bool(preempted))] = Run(
            list(steps), list(accumulate(rows)), list(accumulate(ttft)), list(accumulate(e2e))
        )
    return DoneCounts(session_id, runs)
