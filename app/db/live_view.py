"""The requests live at a step of a recording (not done by then), folded from the
nearest live rows (app.db.live_rows) instead of a whole checkpoint: a seek of the
request table reads a few hundred rows, whatever the size of the waiting queue.

Under a long waiting queue the live rows leave out the requests never scheduled yet;
the page reads those from the requests table (app.db.request_page; `Pending`:
app.db.request_rows). Live rows of an earlier step are folded on to the step: the
requests they left out whose life changed in between (scheduled, or ended while waiting)
are read from the requests table as the writer's fold had them, and the frames do the
rest. A recording without live rows near the step (made before them, or by a writer that
did not see the session from its start) gives None: the caller folds the whole state.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from app import fast_json
from app.db.checkpoint_queue import COLUMNS, rebuilt, unstarted_by, waiting_at
from app.db.live_rows import MAX_EXCEPTIONS, LiveRows, Reasons, decode_live_rows, never_scheduled
from app.db.models import LiveRowsRecord, RequestRecord
from app.db.queries import iter_frames
from app.db.request_rows import Pending
from app.frames.fold import SessionState
from protocol.codes import FrameType

MAX_FOLD_FRAMES = 600
"""Frames after the live rows a view folds at most (else the caller's whole fold)."""
MAX_NAMED = 5000
"""Requests marked in those frames past which the left-out ones that changed are found by
their arrival range."""


class LiveView(NamedTuple):
    fold: SessionState
    """Its requests: those live at the step (and some done by then), but the pending."""
    pending: Pending | None


def live_view_at(db: Session, session_id: str, step: int, seq: int) -> LiveView | None:
    """The live requests at `step`, whose last frame is `seq`; None if the recording has
    no live rows close enough before it."""
    rec = db.execute(
        select(LiveRowsRecord.seq, LiveRowsRecord.state)
        .where(LiveRowsRecord.session_id == session_id, LiveRowsRecord.seq <= seq)
        .order_by(LiveRowsRecord.seq.desc())
        .limit(1)
    ).first()
    if rec is None or seq - rec.seq > MAX_FOLD_FRAMES:
        return None
    data = decode_live_rows(rec.state)
    # A state holding only the live rows (what the table reads), to fold on from.
    state = SessionState(session_id)
    state.seq, state.step = data["seq"], data["step"]
    state.requests = data["rows"]
    state.waiting_detail = data["waiting_detail"]
    state.in_flight = set(data["in_flight"])
    state.blocks.kept = False  # the table's rows need no block map (filling one: ~7 ms)
    left_out = data["pending"]
    reasons = data["reasons"] or {"default": None, "exceptions": {}}
    # (None after its own frame: a stored block spanning it would be read for nothing.)
    frames = [
        (frame_seq, fast_json.loads(text))
        for frame_seq, text in (iter_frames(db, session_id, rec.seq, seq) if seq > rec.seq else ())
    ]
    if left_out is not None and rec.seq != seq:
        changed = _changed_since(db, session_id, data, reasons, step, _named(frames))
        state.requests.update(changed)
        left_out -= len(changed)
    state.index.rebuild(state.requests.items())
    for frame_seq, frame in frames:
        state.apply(frame["type"], frame_seq, frame["data"])
    if left_out is None:
        return LiveView(state, None)
    if rec.seq != seq:
        # Those still waiting, never scheduled, are left out at this step too: the ones
        # that arrived since, with them; their reasons are this step's.
        arrived = [r for r, row in state.requests.items() if never_scheduled(row)]
        for req in arrived:
            del state.requests[req]
        left_out += len(arrived)
        if not left_out:
            return LiveView(state, None)  # the queue has emptied of them
        step_reasons = state.reasons
        if step_reasons.default is None or step_reasons.step != step:
            return None  # this step named no default reason: the whole fold tells them
        reasons = {"default": step_reasons.default, "exceptions": dict(step_reasons.exceptions)}
        if len(reasons["exceptions"]) > MAX_EXCEPTIONS:
            return None
    pending = Pending(
        step, reasons["default"], reasons["exceptions"], state.waiting_detail, left_out
    )
    return LiveView(state, pending)


def _changed_since(
    db: Session,
    session_id: str,
    data: LiveRows,
    reasons: Reasons,
    step: int,
    named: set[str] | None,
) -> dict[str, Any]:
    """The rows of the requests `data` left out (never scheduled by the end of its step)
    whose life changes by `step` (scheduled, or ended while waiting), as the writer's fold
    had them then, for the frames to fold on. `named`: the requests the frames to fold on
    mark (None: too many), among which are those requests."""
    at = data["step"]
    R = RequestRecord
    from_step = data.get("pending_from") or 0
    changed = or_(
        and_(R.first_scheduled_step > at, R.first_scheduled_step <= step),
        and_(R.finish_step > at, R.finish_step <= step),
    )
    default, exceptions = reasons["default"], reasons["exceptions"]
    if named is None:
        stmt = select(*COLUMNS).where(*waiting_at(session_id, from_step, at), changed)
        return {r[0]: rebuilt(r, default, exceptions) for r in db.execute(stmt)}
    # By id (the primary key), the arrival range checked here: in the database it walks
    # every request of that range, i.e. the whole waiting queue (30-50 ms at 100,000
    # requests, for the few rows a seek folds on).
    stmt = select(*COLUMNS).where(
        R.session_id == session_id, R.req_id.in_(named), *unstarted_by(at), changed
    )
    return {
        r[0]: rebuilt(r, default, exceptions)
        for r in db.execute(stmt)
        if r.arrival_step is not None and from_step <= r.arrival_step <= at
    }


def _named(frames: list[tuple[int, dict[str, Any]]]) -> set[str] | None:
    """The requests the frames' request marks name: a requests row's first scheduled step
    and finish step are written from its marks only (app.db.writes), so every request
    whose life changes within the frames is among them. None past MAX_NAMED."""
    names = {frame["data"]["req"] for _, frame in frames if frame["type"] == FrameType.REQUEST}
    return None if len(names) > MAX_NAMED else names
