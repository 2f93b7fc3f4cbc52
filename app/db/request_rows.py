"""The request table's rows of the database (app.db.request_page): the SQL conditions
that pick a step's done rows and never-scheduled waiting rows for a query, the table's
sort order in Python (equal to the database's and the fold's), a stored request as the
fold's row (`done_row`, `pending_row`) and the arrival seqs that order them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, func, or_, select
from sqlalchemy.orm import Session

from app.db.models import RequestRecord
from app.frames.rows import new_row
from engine.waiting import waiting_text
from protocol.codes import RequestStatus
from protocol.wire import WaitingDetail

R = RequestRecord
SORT_COLUMNS = {"ttft": R.ttft, "e2e": R.e2e, "preemptions": R.num_preemptions}
ROW_KEYS = {"ttft": "ttft", "e2e": "e2e", "preemptions": "num_preemptions"}
COMPLETED = ("stop", "length")


def done_where(session_id: str, step: int, query: Any) -> list[ColumnElement[bool]] | None:
    """The done rows' conditions for `query` (app.request_table.RequestQuery); None when
    no done row can match (a live status, a waiting reason or a phase asked for)."""
    conds: list[ColumnElement[bool]] = [R.session_id == session_id, R.finish_step <= step]
    if query.status:
        wanted = query.status & {"finished", "rejected"}
        if not wanted:
            return None
        if wanted == {"finished"}:
            conds.append(or_(R.status == RequestStatus.FINISHED, R.status.is_(None)))
        elif wanted == {"rejected"}:
            conds.append(R.status == RequestStatus.REJECTED)
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


def done_row(r: RequestRecord) -> dict[str, Any]:
    """A done request as the table's row (protocol.views.TableRow's keys, app.request_table;
    its speculative counts None: a recording keeps none per request)."""
    rejected = r.status == RequestStatus.REJECTED
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
        # Not recorded per request: unknown, not zero.
        "num_draft_tokens": None,
        "num_accepted_tokens": None,
        "placeholders": None,
        "waiting_text": None,
        "phase": None,
        "ttft": r.ttft,
        "itl": itl,
        "e2e": None if rejected else r.e2e,
        "arrival_seq": r.arrival_seq,
    }


def sort_key(query: Any) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
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


def pending_where(
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


def pending_row(r: RequestRecord, pending: Pending) -> dict[str, Any]:
    """A request waiting at the step, never scheduled by then, as the fold's row."""
    reason = pending.exceptions.get(r.req_id, pending.default)
    row: dict[str, Any] = dict(new_row(r.req_id, 0, 0.0))
    del row["segments"]  # (served apart: app.db.request_segments)
    row.update(
        arrived_step=r.arrival_step,
        arrived_t=r.arrival_t,
        num_prompt_tokens=r.num_prompt_tokens,
        num_tokens=r.num_prompt_tokens,
        max_tokens=r.max_tokens,
        priority=r.priority,
        waiting_reason=reason,
        ttft=None,
        num_output_tokens=0,
        itl=None,
        phase=None,
        e2e=None,
        waiting_text=waiting_text(r.req_id, reason, pending.detail) if reason else None,
        arrival_seq=r.arrival_seq,
    )
    return row
