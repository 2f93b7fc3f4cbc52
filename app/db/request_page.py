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
from collections.abc import Hashable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db.done_counts import Scope, done_counts
from app.db.request_pieces import Piece, key_row, plan_pieces
from app.db.request_rows import (
    SORT_COLUMNS,
    Pending,
    R,
    done_row,
    done_where,
    pending_row,
    pending_where,
    sort_key,
)

WALK_ORDER_FROM = 2000
"""Done rows from which a page walks the index of its order rather than the finish-step
range (sorting that few rows is cheaper than walking the whole session)."""


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
    scope: Scope | None = None,
) -> list[int]:
    """The rows of each piece; kept for the next pages of the same table (a page deep in
    it costs its window, not another count of every row). From the recording's done
    rows' counts (app.db.done_counts) and the live rows' pending count, where those tell
    the query's rows."""
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
    if scope is not None:
        counted = _counted(db, session_id, scope, step, query, pieces, pending)
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
    scope: Scope,
    step: int,
    query: Any,
    pieces: list[Piece],
    pending: Pending | None,
) -> list[int] | None:
    """The pieces' counts from the kept counts; None when they cannot tell them. The
    rows done after the counts' last step (of a recording being made, the last step or
    two) are counted in the database."""
    if query.priority is not None or query.prefix_hit is not None or query.q:
        return None
    if any(x.pending for x in pieces) and (
        pending is None or pending.size is None or query.reason is not None
    ):
        return None
    done = done_counts(db, session_id, *scope) if any(x.done for x in pieces) else None
    if done is None and any(x.done for x in pieces):
        return None
    upto = step if done is None else done.upto
    beyond = step > upto
    counted_to = min(step, upto)
    if any(x.done and x.pending for x in pieces) and (
        beyond or (done is not None and not done.arrivals_ok(db))
    ):
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
            n += done.count(counted_to, statuses, query.preempted, x.done)
            if beyond:  # done after the counts' last step, by `step`
                more = select(func.count()).select_from(R).where(x.where, R.finish_step > upto)
                n += db.scalar(more) or 0
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
    scope: Scope | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """(total rows matching, the page) at `step`. `live_rows`: the fold's rows at `step`
    of requests not done by then, with their `arrival_seq` (app.request_table.live_rows_at),
    unfiltered; not changed (the page's rows are copies). `pending`: the never-scheduled
    waiting requests are not among them but in the requests table (app.db.live_view).
    `as_of`: the step's last frame, given when the counts may be kept for the next page
    of the same table (what the requests table holds of a step is final after it).
    `scope`: the recording's key and last final step (app.db.done_counts.counts_scope),
    given when its done rows may be counted from kept counts."""
    live = [r for r in live_rows if query.matches(r)]
    key = sort_key(query)
    live.sort(key=key)
    done = done_where(session_id, step, query)
    pend = None if pending is None else pending_where(session_id, step, query, pending)
    pieces = plan_pieces(session_id, query, step, done, pend)
    counts = _counts(db, session_id, step, query, pieces, pending is None, as_of, pending, scope)
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
            window.append(key_row(req, a, s, v, query, is_pending))
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
