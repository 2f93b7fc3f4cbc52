"""A request row of the fold (protocol.views.RequestRow): a new one and its segments."""

from __future__ import annotations

from protocol.codes import RequestStatus, SegmentKind
from protocol.views import RequestRow


def new_row(req: str, step: int, t: float) -> RequestRow:
    """A request first seen at `step` (time `t`): waiting, nothing known yet."""
    return {
        "req": req,
        "status": RequestStatus.WAITING.value,
        "num_prompt_tokens": 0,
        "num_tokens": 0,
        "num_computed_tokens": 0,
        "max_tokens": 0,
        "priority": 0,
        "num_preemptions": 0,
        "prefix_hit": 0,
        "arrived_step": step,
        "arrived_t": t,
        "first_scheduled_step": None,
        "first_token_t": None,
        "last_token_t": None,
        "finish_t": None,
        "finish_step": None,
        "finish_reason": None,
        "waiting_reason": None,
        "num_draft_tokens": 0,
        "num_accepted_tokens": 0,
        "placeholders": 0,
        "segments": [[SegmentKind.WAITING.value, step, None, 0]],
    }


def close_open(row: RequestRow, step: int) -> None:
    """End the row's open segment before `step` (dropped if it would be empty)."""
    last = row["segments"][-1] if row["segments"] else None
    if last is not None and last[2] is None:
        if step - 1 < last[1]:
            row["segments"].pop()
        else:
            last[2] = step - 1
