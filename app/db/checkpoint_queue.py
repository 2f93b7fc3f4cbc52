"""A checkpoint's left-out rows read back: under a long waiting queue the recorder's
writer stores a checkpoint without its never-scheduled waiting rows (all alike but for
their arrival numbers; app.db.live_rows decides where that is exact) and with what
rebuilds them (app.frames.checkpoint.LeftOut). They are the requests the requests table
has arrived by the checkpoint's seq and neither scheduled nor ended by its step; each is
rebuilt as the fold's row and merged with the rows kept by arrival seq, the fold's order.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import itemgetter
from typing import Any

from sqlalchemy import ColumnElement, or_, select
from sqlalchemy.orm import Session

from app.db.checkpoint_codec import plain_pending_row
from app.db.models import RequestRecord
from app.frames.checkpoint import Checkpoint

R = RequestRecord
COLUMNS = (R.req_id, R.num_prompt_tokens, R.max_tokens, R.priority, R.arrival_step, R.arrival_t)
"""What rebuilds a never-scheduled row (`rebuilt`), in this order."""


def waiting_at(session_id: str, from_step: int, step: int) -> list[ColumnElement[bool]]:
    """The requests arrived from `from_step` to `step` and neither scheduled nor ended by
    the end of `step`: the never-scheduled waiting ones then."""
    return [
        R.session_id == session_id,
        R.arrival_step >= from_step,
        R.arrival_step <= step,
        *unstarted_by(step),
    ]


def unstarted_by(step: int) -> list[ColumnElement[bool]]:
    """Neither scheduled nor ended by the end of `step`."""
    return [
        or_(R.first_scheduled_step.is_(None), R.first_scheduled_step > step),
        or_(R.finish_step.is_(None), R.finish_step > step),
    ]


def rebuilt(row: Any, default: str | None, exceptions: Mapping[str, str | None]) -> dict[str, Any]:
    """The fold's row of a never-scheduled request from its COLUMNS, waiting for
    `exceptions`' reason or else `default`."""
    req, prompt, max_tokens, priority, arrived, t = row
    reason = exceptions.get(req, default)
    return plain_pending_row(req, [prompt, prompt, max_tokens, priority, arrived, t, reason])


def complete(db: Session, session_id: str, data: Checkpoint) -> bool:
    """Put the left-out rows of a decoded checkpoint back in place (a checkpoint stored
    whole is left as it is). False if the requests table does not hold exactly as many
    as were left out (`data` is then of no use)."""
    left = data.pop("left_out", None)
    if left is None:
        return True
    step, seq = data["step"], data["seq"]
    stmt = (
        select(R.arrival_seq, *COLUMNS)
        .where(*waiting_at(session_id, left["from_step"], step), R.arrival_seq <= seq)
        .order_by(R.arrival_seq)
    )
    default, exceptions = left["default"], left["exceptions"]
    rows: list[tuple[int, str, Any]] = [
        (r[0] or 0, r[1], rebuilt(r[1:], default, exceptions)) for r in db.execute(stmt)
    ]
    if len(rows) != left["count"]:
        return False
    kept = data["requests"]
    rows += [(s, req, kept[req]) for s, req in zip(left["seqs"], kept, strict=True)]
    rows.sort(key=itemgetter(0))
    data["requests"] = {req: row for _, req, row in rows}
    return True
