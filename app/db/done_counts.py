"""The done requests of a recording counted at any step from one read: per status and
preempted-or-not, the finish steps and the running counts of rows, of rows with a TTFT
and of rows with an E2E (one walk of ix_requests_session_finish). A page of
the request table then counts its done rows at a new step without scanning them again
(app.db.request_page): the count of a big range was most of a seek's time.

Only for what those columns tell (status, preempted, a known or unknown sort value);
a query on priority, prefix hits or the id counts in the database as before.

A recording's done rows are final through the step before its last written one (frames
are written in seq order and their steps never decrease): counts go that far (`upto`)
and count on as it grows (`extend`, the new rows only), being made or ended.

The writer keeps the counts of each recording it writes and stores them in
`done_counts` (`store`) as they grow and when the recording ends (the importer when it
imports one): a page's first ask reads one row and counts on from there (a few
thousand rows at most). A recording without them (made before them) has them read from
its requests, in a thread.
"""

from __future__ import annotations

import logging
import threading
import zlib
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Hashable
from itertools import accumulate
from typing import Any, NamedTuple

from sqlalchemy import Engine, Text, cast, func, literal, or_, select
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from app import fast_json
from app.db.models import DoneCountsRecord, RequestRecord
from app.db.queries import SessionRow

log = logging.getLogger("batchscope.db")
R = RequestRecord
KEPT = 8
"""Recordings whose counts are kept."""
STORE_ROWS = 2048
"""The writer stores a recording's counts again once this many more rows are done, or a
sixteenth of those it stored last if more: a first ask counts on over that many rows at
most, and the stores of a 100,000-request recording are a few dozen."""


class Run(NamedTuple):
    """One (status, preempted) group: its finish steps ascending, and the running
    counts of its rows, of those with a TTFT and of those with an E2E at each."""

    steps: list[int]
    rows: list[int]
    ttft: list[int]
    e2e: list[int]


class DoneCounts:
    def __init__(
        self,
        session_id: str,
        runs: dict[tuple[str | None, bool], Run],
        arrivals_ok: bool | None,
        upto: int,
    ) -> None:
        self.session_id = session_id
        self.runs = runs
        """Replaced whole (never changed in place) when they count on: read it once."""
        self._arrivals_ok = arrivals_ok
        """None: not read yet."""
        self.upto = upto
        """The last step they count."""
        self._extending = threading.Lock()

    def rows(self) -> int:
        """How many done rows they count."""
        return sum(run.rows[-1] for run in self.runs.values())

    def arrivals_ok(self, db: Session) -> bool:
        """Whether every done row (through `upto`) arrived by its finish step (read
        once), so that the rows arrived by a step hold those done by it: what a piece
        holding done and pending rows counts (app.db.request_page's union)."""
        if self._arrivals_ok is None:
            self._arrivals_ok = _arrivals_ok(db, self.session_id, None, self.upto)
        return self._arrivals_ok

    def extend(self, db: Session, upto: int) -> None:
        """Count on through step `upto` (whose done rows are final), reading only the rows
        done after the last step counted."""
        with self._extending:
            last = self.upto
            if upto <= last:
                return
            runs = dict(self.runs)
            for key, more in _read_runs(db, self.session_id, last, upto).items():
                had = runs.get(key)
                runs[key] = more if had is None else _joined(had, more)
            ok = self._arrivals_ok
            if ok:  # only rows done after `last` can spoil it
                ok = _arrivals_ok(db, self.session_id, last, upto)
            # Readers check `upto` before they read `runs`: set it last.
            self.runs, self._arrivals_ok, self.upto = runs, ok, upto

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


def store(db: Session, counts: DoneCounts, last_seq: int) -> None:
    """Store `counts` (through their `upto`, final steps only) as of frame `last_seq`."""
    packed = _pack(counts, counts.arrivals_ok(db))
    db.merge(DoneCountsRecord(session_id=counts.session_id, last_seq=last_seq, counts=packed))


def stored(db: Session, session_id: str) -> DoneCounts | None:
    """The stored counts (through their `upto`), if any."""
    packed = db.scalar(
        select(DoneCountsRecord.counts).where(DoneCountsRecord.session_id == session_id)
    )
    return None if packed is None else _unpack(session_id, packed)


def _pack(counts: DoneCounts, arrivals_ok: bool) -> bytes:
    runs = [[status, ran, *run] for (status, ran), run in counts.runs.items()]
    data = {"runs": runs, "arrivals_ok": arrivals_ok, "upto": counts.upto}
    return zlib.compress(fast_json.dumps(data), 1)


def _unpack(session_id: str, packed: bytes) -> DoneCounts:
    data = fast_json.loads(zlib.decompress(packed))
    runs = {(status, bool(ran)): Run(*cols) for status, ran, *cols in data["runs"]}
    return DoneCounts(session_id, runs, bool(data["arrivals_ok"]), int(data["upto"]))


def final_step(steps: int) -> int:
    """The last step whose done rows are final in a recording of `steps` steps written so
    far: the one before its last (frames are written in seq order and their steps never
    decrease)."""
    return steps - 2


Scope = tuple[Hashable, int]
"""What tells a recording from another of the same id (`ended`), and the last step whose
done rows are final (`final`): of `done_counts`."""


def counts_scope(meta: SessionRow) -> Scope | None:
    """(`ended`, `final`) of `done_counts` for the recording `meta` describes: ended, its
    start and end times and last frame, and its last step (a frame written after it
    ended is another key); being made, its start and its `final_step`; None while it
    has no such step."""
    if meta["ended_at"] is not None:
        return (meta["started_at"], meta["ended_at"], meta["last_seq"]), meta["steps"] - 1
    if final_step(meta["steps"]) >= 0:
        return (meta["started_at"], "being made"), final_step(meta["steps"])
    return None


_kept: OrderedDict[tuple[str, str, Hashable], DoneCounts] = OrderedDict()
_started: OrderedDict[tuple[str, str, Hashable], None] = OrderedDict()
_lock = threading.Lock()


def done_counts(db: Session, session_id: str, ended: Hashable, final: int) -> DoneCounts | None:
    """The counts of a recording (kept) through step `final` at least, or None while they
    are not read yet. `final`: the last step whose done rows are final (`counts_scope`);
    the counts count on to it as the recording grows. The first ask reads the stored
    counts (`store`) and counts on from them; without them it starts reading them from
    the requests in a thread of its own, on a connection of its own, and the caller
    counts in the database meanwhile (one count costs less than the read: 400-600 ms at
    100,000 requests, beside the first seeks). A database of one shared connection
    (`sqlite://`, StaticPool) reads them on the second ask, in the caller's session: a
    thread beside it would share its transaction.
    `ended`: what tells this recording from another of the same id (deleted, then
    imported again), e.g. its start and end times, or its start while being made."""
    bind = db.get_bind()
    key = (str(bind.engine.url), session_id, ended)
    shared = isinstance(bind.engine.pool, StaticPool)
    with _lock:
        kept = _kept.get(key)
        if kept is not None:
            _kept.move_to_end(key)
        first = kept is None and key not in _started
        if first:
            _started[key] = None
            while len(_started) > 4 * KEPT:
                _started.popitem(last=False)
        elif kept is None and not shared:
            return None  # being read (or its read failed: counted in the database)
    if kept is not None:
        kept.extend(db, final)
        return kept
    if first:
        kept = stored(db, session_id)
        if kept is not None:
            kept.extend(db, final)  # the rows done since they were stored
            return _keep(key, kept)
        if not shared:
            threading.Thread(
                target=_read_apart,
                args=(bind.engine, key, final),
                name="done-counts",
                daemon=True,
            ).start()
        return None
    return _keep(key, read(db, session_id, final))


def _read_apart(engine: Engine, key: tuple[str, str, Hashable], upto: int) -> None:
    try:
        with Session(engine) as db:
            _keep(key, read(db, key[1], upto))
    except Exception:  # the caller counts in the database as before
        log.warning("done counts of %s not read", key[1], exc_info=True)


def _keep(key: tuple[str, str, Hashable], counts: DoneCounts) -> DoneCounts:
    with _lock:
        _kept[key] = counts
        while len(_kept) > KEPT:
            _kept.popitem(last=False)
    return counts


def read(db: Session, session_id: str, upto: int) -> DoneCounts:
    """The counts through step `upto`, read from the requests."""
    return DoneCounts(session_id, _read_runs(db, session_id, None, upto), None, upto)


def _done_in(session_id: str, after: int | None, upto: int | None) -> list[Any]:
    """The rows done in steps (after, upto] (None: unbounded)."""
    where = [R.session_id == session_id, R.finish_step.is_not(None)]
    if after is not None:
        where.append(R.finish_step > after)
    if upto is not None:
        where.append(R.finish_step <= upto)
    return where


def _read_runs(
    db: Session, session_id: str, after: int | None, upto: int | None
) -> dict[tuple[str | None, bool], Run]:
    """Each (status, preempted) group's finish steps and per-step counts, one row per
    group: a list of numbers as text per column. One row per finish step was 80,000 rows
    at 100,000 requests, and a thread reading them took the GIL back for each one: beside
    a busy request thread the read took seconds, and slowed the request by a third."""
    ran = (R.num_preemptions > 0).label("ran")
    per_step = (
        select(
            R.status.label("status"),
            ran,
            R.finish_step.label("step"),
            func.count().label("rows"),
            func.count(R.ttft).label("ttft"),
            func.count(R.e2e).label("e2e"),
        )
        .where(*_done_in(session_id, after, upto))
        .group_by(R.status, ran, R.finish_step)
        .subquery()
    )
    c = per_step.c
    postgres = db.get_bind().dialect.name == "postgresql"

    def listed(col: Any) -> Any:
        if postgres:
            # string_agg(text, ',' ORDER BY step)
            return func.string_agg(cast(col, Text), aggregate_order_by(literal(","), c.step))
        # SQLite feeds a group's rows to every aggregate in the same order (sorted below).
        return func.group_concat(col)

    stmt = select(
        c.status, c.ran, listed(c.step), listed(c.rows), listed(c.ttft), listed(c.e2e)
    ).group_by(c.status, c.ran)
    runs: dict[tuple[str | None, bool], Run] = {}
    for status, preempted, *texts in db.execute(stmt).all():
        steps, rows, ttft, e2e = (list(map(int, text.split(","))) for text in texts)
        if steps != sorted(steps):
            order = sorted(range(len(steps)), key=steps.__getitem__)
            steps, rows, ttft, e2e = ([col[i] for i in order] for col in (steps, rows, ttft, e2e))
        runs[(status, bool(preempted))] = Run(
            steps, list(accumulate(rows)), list(accumulate(ttft)), list(accumulate(e2e))
        )
    return runs


def _joined(had: Run, more: Run) -> Run:
    """`had` counted on by `more` (later steps, sums from 0)."""
    return Run(
        had.steps + more.steps,
        had.rows + [had.rows[-1] + n for n in more.rows],
        had.ttft + [had.ttft[-1] + n for n in more.ttft],
        had.e2e + [had.e2e[-1] + n for n in more.e2e],
    )


def _arrivals_ok(db: Session, session_id: str, after: int | None, upto: int | None) -> bool:
    """No row done in (after, upto] arrived after its finish step (or never)."""
    odd = db.scalar(
        select(R.req_id)
        .where(
            *_done_in(session_id, after, upto),
            or_(R.arrival_step.is_(None), R.arrival_step > R.finish_step),
        )
        .limit(1)
    )
    return odd is None
