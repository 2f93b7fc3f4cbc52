"""A checkpoint's left-out rows read back: under a long waiting queue the recorder's
writer stores a checkpoint without its never-scheduled waiting rows (all alike but for
their arrival numbers; app.db.live_rows decides where that is exact) and with what
rebuilds them (app.frames.checkpoint.LeftOut). They are the requests the requests table
has arrived by the checkpoint's seq and neither scheduled nor ended by its step; each is
rebuilt as the fold's row and merged with the rows kept by arrival seq, the fold's order.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.db.checkpoint_codec import plain_pending_row
from app.db.models import RequestRecord
from app.frames.checkpoint import Checkpoint

R = RequestRecord


def complete(db: Session, session_id: str, data: Checkpoint) -> bool:
    """Put the left-out rows of a decoded checkpoint back in place (a checkpoint stored
    whole is left as it is). False if the requests table does not hold exactly as many
    as were left out (`data` is then of no use)."""
    left = data.pop("left_out", None)
    if left is None:
        return True
    step, seq = data["step"], data["seq"]
    stmt = (
        select(
            R.arrival_seq,
            R.req_id,
            R.num_prompt_tokens,
            R.max_tokens,
            R.priority,
            R.arrival_step,
            R.arrival_t,
        )
        .where(
            R.session_id == session_id,
            R.arrival_step >= left["from_step"],
            R.arrival_step <= step,
            R.arrival_seq <= seq,
            or_(R.first_scheduled_step.is_(None), R.first_scheduled_step > step),
            or_(R.finish_step.is_(None), R.finish_step > step),
        )
        .order_by(R.arrival_seq)
    )
    default, exceptions = left["default"], left["exceptions"]
    rows: list[tuple[int, str, Any]] = []
    for arrival_seq, req, prompt, max_tokens, priority, arrived, t in db.execute(stmt):
        fields = [prompt, prompt, max_tokens, priority, arrived, t, exceptions.get(req, default)]
        rows.append((arrival_seq or 0, req, plain_pending_row(req, fields)))  # PENDING_FIELDS
    if len(rows) != left["count"]:
        return False
    kept = data["requests"]
    rows += [(s, req, kept[req]) for s, req in zip(left["seqs"], kept, strict=True)]
    rows.sort(key=itemgetter(0))
    data["requests"] = {req: row for _, req, row in rows}
    return True
