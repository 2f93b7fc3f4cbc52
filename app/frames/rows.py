"""A request row of the fold (protocol.views.RequestRow): a new one, its segments, and the
request table's row made from it (protocol.views.TableRow)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from engine.waiting import waiting_text
from protocol.codes import RequestMark, RequestStatus, SegmentKind
from protocol.views import ROW_COLUMNS, RequestRow, TableRow
from protocol.wire import WaitingDetail

RUNNING, FINISHED = RequestStatus.RUNNING.value, RequestStatus.FINISHED.value
WAITING_SEGMENT = SegmentKind.WAITING.value

NEW_ROW: dict[str, Any] = {
    "status": RequestStatus.WAITING.value,
    "num_prompt_tokens": 0,
    "num_tokens": 0,
    "num_computed_tokens": 0,
    "max_tokens": 0,
    "priority": 0,
    "num_preemptions": 0,
    "prefix_hit": 0,
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
}
"""A new row (a request first seen, nothing known of it yet): every column but the
request's own (`req`, `arrived_step`, `arrived_t`: when it was first seen) and its
segments. static/js/protocol.js's newRow (generated) builds the page's rows from it."""

END_MARKS: dict[str, tuple[str, str]] = {
    RequestMark.REJECTED.value: (RequestStatus.REJECTED.value, "rejected"),
    RequestMark.FINISHED.value: (FINISHED, "abort"),
    RequestMark.ABORTED.value: (FINISHED, "abort"),
}
"""The request marks that end a request: the status its row takes, and its finish
reason when the mark carries none (generated into static/js/protocol.js too)."""


def new_row(req: str, step: int, t: float) -> RequestRow:
    """A request first seen at `step` (time `t`): waiting, nothing known yet."""
    own = {"req": req, "arrived_step": step, "arrived_t": t}
    own["segments"] = [[WAITING_SEGMENT, step, None, 0]]
    return cast(RequestRow, {c: own[c] if c in own else NEW_ROW[c] for c in ROW_COLUMNS})


def close_open(row: RequestRow, step: int) -> None:
    """End the row's open segment before `step` (dropped if it would be empty)."""
    last = row["segments"][-1] if row["segments"] else None
    if last is not None and last[2] is None:
        if step - 1 < last[1]:
            row["segments"].pop()
        else:
            last[2] = step - 1


def table_rows(rows: Iterable[RequestRow], detail: WaitingDetail) -> list[TableRow]:
    """The request table's rows (its JSON twin, /api/requests), new dicts in the order of
    `rows`: no Gantt segments; TTFT, mean ITL and E2E in seconds (None until known), the
    output tokens, the phase of a running request and why a waiting one waits, worded
    with the step's waiting `detail`."""
    out = []
    for r in rows:
        row = cast(TableRow, {k: v for k, v in r.items() if k != "segments"})
        first, last = r["first_token_t"], r["last_token_t"]
        row["ttft"] = None if first is None else round(first - r["arrived_t"], 6)
        outputs = r["num_tokens"] - r["num_prompt_tokens"]
        row["num_output_tokens"] = max(outputs, 0)
        row["itl"] = (
            round((last - first) / (outputs - 1), 6)
            if first is not None and last is not None and outputs > 1
            else None
        )
        segments = r["segments"]
        running = row["status"] == RUNNING and segments
        row["phase"] = segments[-1][0] if running else None
        finish, arrived = row.get("finish_t"), row.get("arrived_t")
        row["e2e"] = (
            round(finish - arrived, 6)
            if row["status"] == FINISHED and finish is not None and arrived is not None
            else None
        )
        reason = row.get("waiting_reason")
        row["waiting_text"] = waiting_text(row["req"], reason, detail) if reason else None
        out.append(row)
    return out
