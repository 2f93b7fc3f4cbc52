"""One page of a recording's request table at a step, for recordings of any size.

The rows of requests done by the step (finished or rejected: nearly all of a big
recording) are filtered, counted, sorted and paged in the database (indexed columns of
`requests`); the requests still live at the step (running, waiting, preempted: bounded by
the engine's queues) come from the fold at that step, with their phase and waiting reason.
The two sorted runs are merged exactly, in the order app.request_table.select_rows gives
(ties by arrival; unknown values last, in arrival order), reading the sort keys of at
most `offset - live .. offset + limit` rows of the done run (from the indexes; in arrival
order by walking ix_requests_session_order), then the whole rows of the page's alone.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Select, and_, func, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql import operators

from app.db.done_counts import done_counts
from app.db.models import RequestRecord
from engine.waiting import waiting_text
from protocol.wire import WaitingDetail

R = RequestRecord
SORT_COLUMNS = {"ttft": R.ttft, "e2e": R.e2e, "preemptions": R.num_preemptions}
ROW_KEYS = {"ttft": "ttft", "e2e": "e2e", "preemptions": "num_preemptions"}
COMPLETED = ("stop", "length")
WALK_ORDER_FROM = 2000
"""Done rows from which a page walks the index of its order rather than the finish-step
range (sorting that few rows is cheaper than walking the whole session)."""


def _where(session_id: str, step: int, query: Any) -> list[ColumnElement[bool]] | None:
    """The done rows' conditions for `query` (app.request_table.RequestQuery); None when
    no done row can match (a live status, a waiting reason or a phase asked for)."""
    conds: list[ColumnElement[bool]] = [R.session_id == session_id, R.finish_step <= step]
    if query.status:
        wanted = query.status & {"finished", "rejected"}
        if not wanted:
            return None
        if wanted == {"finished"}:
            conds.append(or_(R.status == "FINISHED", R.status.is_(None)))
        elif wanted == {"rejected"}:
            conds.append(R.status == "REJECTED")
    if query.reason is not None or query.phase is not None:
        return None
    if query.priority is not None:
        conds.append(R.priority == query.priority)
    if query.prefix_hit is not None:
        conds.append(R.prefix_hit_tokens > 0 if query.prefix_hit else R.prefix_hit_tokens == 0)
    if query.preempted is not None:
        conds.append(R.num_preemptions > 0 if query.preempted else R.num_preemptions == 0)
    if query.q:
        conds.append(_like(query.q))
    return conds


def _ordered(stmt: Select[Any], query: Any) -> Select[Any]:
    arrival = [R.arrival_step, R.arrival_seq, R.req_id]
    if query.sort == "arrival":
        if query.descending:
            return stmt.order_by(*(c.desc() for c in arrival))
        return stmt.order_by(*arrival)
    col = SORT_COLUMNS[query.sort]
    value = col.desc() if query.descending else col.asc()
    return stmt.order_by(col.is_(None), value, *arrival)


def done_row(r: RequestRecord) -> dict[str, Any]:
    """A done request as the table's row (the fold's keys, app.request_table)."""
    rejected = r.status == "REJECTED"
    outputs = r.num_output_tokens
    itl = None
    first, finish = r.first_token_t, r.finish_t
    if first is not None and finish is not None and outputs > 1 and r.finish_reason in COMPLETED:
        itl = round((finish - first) / (outputs - 1), 6)
    total = r.num_prompt_tokens + outputs
    return {
        "req": r.req_id,
        "status": "REJECTED" if rejected else "FINISHED",
        "num_prompt_tokens": r.num_prompt_tokens,
        "num_tokens": total,
        "num_computed_tokens": 0 if rejected else max(total - 1, 0),
        "num_output_tokens": outputs,
        "max_tokens": r.max_tokens,
        "priority": r.priority,
        "num_preemptions": r.num_preemptions,
        "prefix_hit": r.prefix_hit_tokens,
        "arrived_step": r.arrival_step,
        "arrived_t": r.arrival_t,
        "first_scheduled_step": r.first_scheduled_step,
        "first_token_t": r.first_token_t,
        "last_token_t": None,
        "finish_t": r.finish_t,
        "finish_step": r.finish_step,
        # Aborts recorded without a reason were stored by their kind; the fold says abort.
        "finish_reason": "abort" if r.finish_reason == "aborted" else r.finish_reason,
        "waiting_reason": None,
        "waiting_text": None,
        "phase": None,
        "ttft": r.ttft,
        "itl": itl,
        "e2e": None if rejected else r.e2e,
        "arrival_seq": r.arrival_seq,
    }


def _sort_key(query: Any) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """The merge's total order (ascending), equal to the database's and the fold's."""

    def arrival(row: dict[str, Any]) -> tuple[Any, ...]:
        return (row.get("arrived_step") or 0, row.get("arrival_seq") or 0, row["req"])

    if query.sort == "arrival":
        if not query.descending:
            return arrival

        def flipped(row: dict[str, Any]) -> tuple[Any, ...]:
            step, seq, req = arrival(row)
            return (-step, -seq, _Reversed(req))

        return flipped
    key = ROW_KEYS[query.sort]
    sign = -1 if query.descending else 1

    def by_value(row: dict[str, Any]) -> tuple[Any, ...]:
        value = row.get(key)
        return (value is None, 0 if value is None else sign * value, *arrival(row))

    return by_value


class _Reversed:
    """A string ordered backwards (for descending ties on the request id)."""

    __slots__ = ("s",)

    def __init__(self, s: str) -> None:
        self.s = s

    def __lt__(self, other: _Reversed) -> bool:
        return self.s > other.s

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reversed) and self.s == other.s

    def __hash__(self) -> int:
        return hash(self.s)


def arrival_seqs(
    db: Session, session_id: str, req_ids: list[str], step: int | None = None
) -> dict[str, int | None]:
    """The arrival seqs of `req_ids`. With `step`: the requests arrived by then and not
    done are read in one walk of the order index (which holds every column asked for),
    any other of `req_ids` by id."""
    out: dict[str, int | None] = {}
    if step is not None:
        live = select(R.req_id, R.arrival_seq).where(
            R.session_id == session_id,
            R.arrival_step <= step,
            or_(R.finish_step.is_(None), R.finish_step > step),
        )
        out = dict(db.execute(live).all())
        req_ids = [r for r in req_ids if r not in out]
    for i in range(0, len(req_ids), 500):
        chunk = req_ids[i : i + 500]
        # arrival_t, in no index: else a planner without statistics walks a covering
        # index of the whole session rather than look the ids up by the primary key.
        rows = db.execute(
            select(R.req_id, R.arrival_seq, R.arrival_t).where(
                R.session_id == session_id, R.req_id.in_(chunk)
            )
        )
        for req, seq, _ in rows:
            out[req] = seq
    return out


class Pending(NamedTuple):
    """The requests waiting at `step` that were never scheduled by then, left to the
    requests table (app.db.live_view): their waiting reasons (`default`, but the
    `exceptions`) and the step's waiting numbers (for the reasons' words)."""

    step: int
    default: str | None
    exceptions: dict[str, str | None]
    detail: WaitingDetail
    size: int | None = None
    """How many (what the live rows say), if known."""


def _pending_where(
    session_id: str, step: int, query: Any, pending: Pending
) -> list[ColumnElement[bool]] | None:
    """The never-scheduled waiting rows' conditions for `query`; None when none can match."""
    if query.status and "waiting" not in query.status:
        return None
    if query.phase is not None or query.prefix_hit is True or query.preempted is True:
        return None
    conds: list[ColumnElement[bool]] = [
        R.session_id == session_id,
        R.arrival_step <= step,
        or_(R.first_scheduled_step.is_(None), R.first_scheduled_step > step),
        or_(R.finish_step.is_(None), R.finish_step > step),
    ]
    if query.reason is not None:
        if query.reason == pending.default:
            if pending.exceptions:
                conds.append(R.req_id.not_in(list(pending.exceptions)))
        else:
            ids = [r for r, why in pending.exceptions.items() if why == query.reason]
            if not ids:
                return None
            conds.append(R.req_id.in_(ids))
    if query.priority is not None:
        conds.append(R.priority == query.priority)
    if query.q:
        conds.append(_like(query.q))
    return conds


def _like(q: str) -> ColumnElement[bool]:
    escaped = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return func.lower(R.req_id).like(f"%{escaped}%", escape="\\")


class Piece(NamedTuple):
    """Rows of the database's run in one order an index gives."""

    where: ColumnElement[bool]
    walk: ColumnElement[bool] | None
    """Done rows only: the same rows, for a window read by walking the index of `order`
    (the finish step's range hidden from the planner: `+ 0`)."""
    order: list[Any]
    done: str | None
    """Which done rows it holds (app.db.done_counts kinds), None: none."""
    pending: bool
    """Whether it holds the never-scheduled waiting rows."""

    def back(self) -> list[Any]:
        """`order` reversed (each column the other way: a total order, so exactly)."""
        return [_flip(c) for c in self.order]


def _flip(c: Any) -> Any:
    modifier = getattr(c, "modifier", None)
    if modifier is operators.desc_op:
        return c.element.asc()
    if modifier is operators.asc_op:
        return c.element.desc()
    return c.desc()


def _pieces(
    session_id: str,
    query: Any,
    step: int,
    done: list[ColumnElement[bool]] | None,
    pend: list[ColumnElement[bool]] | None,
) -> list[Piece]:
    """The database's rows in the table's order, as consecutive pieces: a never-scheduled
    waiting row has no TTFT nor E2E (unknown: last, in arrival order) and no preemption
    (0), whatever the requests table says of its later life."""
    arrival: list[Any] = [R.arrival_step, R.arrival_seq, R.req_id]
    d = and_(*done) if done is not None else None
    p = and_(*pend) if pend is not None else None
    hidden = (
        None if done is None else [R.finish_step + 0 <= step if c is done[1] else c for c in done]
    )

    def union(*parts: ColumnElement[bool] | None) -> ColumnElement[bool] | None:
        kept = [x for x in parts if x is not None]
        if len(kept) < 2:
            return kept[0] if kept else None
        # Both arrived by the step: one range of the order index holds them (the
        # session and the range outside the OR, where a planner sees them).
        return and_(R.session_id == session_id, R.arrival_step <= step, or_(*kept))

    def only(extra: ColumnElement[bool]) -> ColumnElement[bool] | None:
        return None if d is None else and_(d, extra)

    def piece(
        where: ColumnElement[bool] | None, order: list[Any], kind: str, extra: Any = None
    ) -> Any:
        if where is None:
            return None
        walk = None
        if hidden is not None and (where is d or extra is not None):
            walk = and_(*hidden) if extra is None else and_(*hidden, extra)
        return Piece(where, walk, order, None if d is None else kind, p is not None)

    pieces: list[Piece | None]
    if query.sort == "arrival":
        order = [c.desc() for c in arrival] if query.descending else arrival
        pieces = [piece(union(d, p), order, "all")]
    else:
        col = SORT_COLUMNS[query.sort]
        by_value = [col.desc() if query.descending else col.asc(), *arrival]
        if query.sort == "preemptions":
            ran = piece(only(col > 0), by_value, "ran", col > 0)
            if ran is not None:
                ran = ran._replace(pending=False)
            pieces = [ran, piece(union(only(col == 0), p), arrival, "idle")]
            if not query.descending:
                pieces.reverse()
        else:
            known = piece(only(col.is_not(None)), by_value, "+" + query.sort, col.is_not(None))
            if known is not None:
                known = known._replace(pending=False)
            pieces = [known, piece(union(only(col.is_(None)), p), arrival, "-" + query.sort)]
    return [x for x in pieces if x is not None]


def _key_row(
    req: str, step: int | None, seq: int | None, value: Any, query: Any, pending: bool = False
) -> dict[str, Any]:
    """A database row's sort keys only (what `_sort_key` reads), as done_row (or
    pending_row) would give them (a rejection's E2E is NULL in the database too)."""
    row: dict[str, Any] = {"req": req, "arrived_step": step, "arrival_seq": seq}
    row["_pending" if pending else "_done"] = True
    if query.sort != "arrival":
        if pending:
            value = 0 if query.sort == "preemptions" else None
        row[ROW_KEYS[query.sort]] = value
    return row


def pending_row(r: RequestRecord, pending: Pending) -> dict[str, Any]:
    """A request waiting at the step, never scheduled by then, as the fold's row."""
    reason = pending.exceptions.get(r.req_id, pending.default)
    return {
        "req": r.req_id,
        "status": "WAITING",
        "num_prompt_tokens": r.num_prompt_tokens,
        "num_tokens": r.num_prompt_tokens,
        "num_computed_tokens": 0,
        "max_tokens": r.max_tokens,
        "priority": r.priority,
        "num_preemptions": 0,
        "prefix_hit": 0,
        "arrived_step": r.arrival_step,
        "arrived_t": r.arrival_t,
        "first_scheduled_step": None,
        "first_token_t": None,
        "last_token_t": None,
        "finish_t": None,
        "finish_step": None,
        "finish_reason": None,
        "waiting_reason": reason,
        "num_draft_tokens": 0,
        "num_accepted_tokens": 0,
        "placeholders": 0,
        "ttft": None,
        "num_output_tokens": 0,
        "itl": None,
        "phase": None,
        "e2e": None,
        "waiting_text": waiting_text(r.req_id, reason, pending.detail) if reason else None,
        "arrival_seq": r.arrival_seq,
    }


COUNT_CACHE = 64
_counts_kept: OrderedDict[Hashable, list[int]] = OrderedDict()
_counts_lock = threading.Lock()


def _counts(
    db: Session,
    session_id: str,
    step: int,
    query: Any,
    pieces: list[Piece],
    folded: bool,
    as_of: int | None,
    pending: Pending | None = None,
    ended: Hashable | None = None,
) -> list[int]:
    """The rows of each piece; kept for the next pages of the same table (a page deep in
    it costs its window, not another count of every row). Of an ended recording, from
    its done rows' counts (app.db.done_counts) and the live rows' pending count, where
    those tell the query's rows."""
    key: Hashable | None = None
    if as_of is not None:
        filters = dataclasses.replace(query, offset=0, limit=None)
        key = (str(db.get_bind().engine.url), session_id, step, as_of, folded, filters)
        with _counts_lock:
            kept = _counts_kept.get(key)
            if kept is not None:
                _counts_kept.move_to_end(key)
                return kept
    counted = None
    if ended is not None:
        counted = _counted(db, session_id, ended, step, query, pieces, pending)
    if counted is None:
        counts = [
            db.scalar(select(func.count()).select_from(R).where(x.where)) or 0 for x in pieces
        ]
    else:
        counts = counted
    if key is not None:
        with _counts_lock:
            _counts_kept[key] = counts
            while len(_counts_kept) > COUNT_CACHE:
                _counts_kept.popitem(last=False)
    return counts


def _counted(
    db: Session,
    session_id: str,
    ended: Hashable,
    step: int,
    query: Any,
    pieces: list[Piece],
    pending: Pending | None,
) -> list[int] | None:
    """The pieces' counts from the kept counts; None when they cannot tell them."""
    if query.priority is not None or query.prefix_hit is not None or query.q:
        return None
    if any(x.pending for x in pieces) and (
        pending is None or pending.size is None or query.reason is not None
    ):
        return None
    done = done_counts(db, session_id, ended) if any(x.done for x in pieces) else None
    if done is None and any(x.done for x in pieces):
        return None
    if done is not None and any(x.done and x.pending for x in pieces) and not done.arrivals_ok(db):
        return None
    statuses: frozenset[str | None] | None = None
    wanted = query.status & {"finished", "rejected"}
    if query.status and wanted == {"finished"}:
        statuses = frozenset({"FINISHED", None})
    elif query.status and wanted == {"rejected"}:
        statuses = frozenset({"REJECTED"})
    out = []
    for x in pieces:
        n = 0
        if x.done is not None and done is not None:
            n += done.count(step, statuses, query.preempted, x.done)
        if x.pending and pending is not None and pending.size is not None:
            n += pending.size
        out.append(n)
    return out


def request_page(
    db: Session,
    session_id: str,
    step: int,
    live_rows: list[dict[str, Any]],
    query: Any,
    pending: Pending | None = None,
    as_of: int | None = None,
    ended: Hashable | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """(total rows matching, the page) at `step`. `live_rows`: the fold's rows at `step`
    of requests not done by then, with their `arrival_seq` (app.request_table.live_rows_at),
    unfiltered; not changed (the page's rows are copies). `pending`: the never-scheduled
    waiting requests are not among them but in the requests table (app.db.live_view).
    `as_of`: the step's last frame, given when the counts may be kept for the next page
    of the same table (what the requests table holds of a step is final after it).
    `ended`: given once the recording has ended (its rows never change: their counts
    are kept), what tells it from another of the same id (its start and end times)."""
    live = [r for r in live_rows if query.matches(r)]
    key = _sort_key(query)
    live.sort(key=key)
    done = _where(session_id, step, query)
    pend = None if pending is None else _pending_where(session_id, step, query, pending)
    pieces = _pieces(session_id, query, step, done, pend)
    counts = _counts(db, session_id, step, query, pieces, pending is None, as_of, pending, ended)
    stored = sum(counts)
    total = len(live) + stored
    limit = total if query.limit is None else query.limit
    start, end = query.offset, min(total, query.offset + limit)
    if start >= end:
        return total, []
    # The first `skip` stored rows all come before the page (at most len(live) live rows
    # can stand among the first `start`), and no stored row past `end` can be on it.
    skip = max(0, start - len(live))
    window: list[dict[str, Any]] = []
    value = SORT_COLUMNS[query.sort] if query.sort != "arrival" else R.arrival_seq
    cols = (R.req_id, R.arrival_step, R.arrival_seq, value, R.finish_step)
    at_piece = 0
    for piece, count in zip(pieces, counts, strict=True):
        lo, hi = max(skip - at_piece, 0), min(end - at_piece, count)
        at_piece += count
        if lo >= hi:
            continue
        where, order = piece.where, piece.order
        if piece.walk is not None and count > WALK_ORDER_FROM:
            # Many done rows alone: walk the index of the order (each holds finish_step)
            # instead of sorting them all.
            where = piece.walk
        if lo > count - hi:
            # Nearer the end: walk the order backwards (the same rows; sorted below).
            order, lo, hi = piece.back(), count - hi, count - lo
        stmt = select(*cols).where(where).order_by(*order).offset(lo).limit(hi - lo)
        for req, a, s, v, fin in db.execute(stmt):
            is_pending = pending is not None and (fin is None or fin > step)
            window.append(_key_row(req, a, s, v, query, is_pending))
    # Without the skipped rows (all of them ahead of `start`), the page starts at
    # `start - skip` of the rest, which live + window holds far enough.
    at = start - skip
    page = sorted(live + window, key=key)[at : at + (end - start)]
    wanted = [r["req"] for r in page if r.get("_done") or r.get("_pending")]
    full: dict[str, dict[str, Any]] = {}
    if wanted:
        recs = db.scalars(select(R).where(R.session_id == session_id, R.req_id.in_(wanted)))
        for r in recs:
            full[r.req_id] = (
                done_row(r)
                if pending is None or (r.finish_step is not None and r.finish_step <= step)
                else pending_row(r, pending)
            )
    return total, [full[r["req"]] if r["req"] in full else dict(r) for r in page]
