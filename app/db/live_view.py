"""The requests live at a step of a recording (not done by then), folded from the
nearest live rows (app.db.live_rows) instead of a whole checkpoint: a seek of the
request table reads a few hundred rows, whatever the size of the waiting queue.

Under a long waiting queue the live rows leave out the requests never scheduled yet
(taken at every step end); the page reads those from the requests table
(app.db.request_page; `Pending`: app.db.request_rows). A recording without live rows
near the step (made before them, or by a writer that did not see the session from its
start) gives None: the caller folds the whole state, as before.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.live_rows import decode_live_rows
from app.db.models import LiveRowsRecord
from app.db.queries import iter_frames
from app.db.request_rows import Pending
from app.frames.fold import SessionState

MAX_FOLD_FRAMES = 600
"""Frames after the live rows a view folds at most (else the caller's whole fold)."""


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
    pending: Pending | None = None
    if data["pending"] is not None:
        reasons = data["reasons"] or {"default": None, "exceptions": {}}
        if rec.seq != seq:
            return None  # left out at another step's end: not this step's queue
        pending = Pending(
            step, reasons["default"], reasons["exceptions"], data["waiting_detail"], data["pending"]
        )
    # A state holding only the live rows (what the table reads), to fold on from.
    state = SessionState(session_id)
    state.seq, state.step = data["seq"], data["step"]
    state.requests = data["rows"]
    state.waiting_detail = data["waiting_detail"]
    state.in_flight = set(data["in_flight"])
    # (None after its own frame: a stored block spanning it would be read for nothing.)
    for frame_seq, text in iter_frames(db, session_id, rec.seq, seq) if seq > rec.seq else ():
        frame = json.loads(text)
        state.apply(frame["type"], frame_seq, frame["data"])
    return LiveView(state, pending)
