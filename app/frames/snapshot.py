"""What a fold shows of a session, built from plain data: the snapshot a late joiner gets
(docs/protocol.md) from the fold's scalars, request rows and history, and a step as its
history keeps it (from the step's iteration frame). Nothing here changes them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocol.codes import RequestStatus
from protocol.views import (
    ROW_COLUMNS,
    RequestRow,
    Segment,
    SnapshotData,
    SnapshotHead,
    StepSummary,
)
from protocol.wire import IterationData, WaitingDetail

COMPACT_HISTORY = 128
COMPACT_DONE_ROWS = 100
"""A compact snapshot (a client that fell behind): the latest COMPACT_HISTORY steps and
COMPACT_DONE_ROWS finished or rejected rows."""


SNAPSHOT_PLAN_STEPS = 64
"""Steps whose plan a columns snapshot keeps (a plain one keeps PLAN_STEPS)."""

_DONE = (RequestStatus.FINISHED.value, RequestStatus.REJECTED.value)


def build(
    head: SnapshotHead,
    rows: list[RequestRow],
    history: list[StepSummary],
    *,
    totals: Mapping[str, int],
    dropped_rows: int,
    waiting_detail: WaitingDetail,
    compact: bool = False,
    columns: bool = False,
) -> SnapshotData:
    """The state for a late joiner (docs/protocol.md), without its blocks. `rows`: every
    request row the fold keeps (`dropped_rows` more were dropped), `history` its steps
    (both lists are the caller's copies). `compact`: only the latest COMPACT_HISTORY
    steps and COMPACT_DONE_ROWS finished or rejected rows (a client that fell behind).
    `totals` count the whole session whatever was left out (`requests`: every request it
    has had); `left_out` says what a compact snapshot, or the fold's own bound on
    finished rows, left out (the rest is in the recording). `columns`: `requests` as
    `{"columns": [...], "rows": [[...], ...]}` (a quarter of the bytes, faster to encode
    and parse for a 10,000-request session)."""
    step = head["step"]
    num_requests = len(rows) + dropped_rows
    selected = rows
    steps_left_out = 0
    if compact:
        steps_left_out = max(len(history) - COMPACT_HISTORY, 0)
        history = history[-COMPACT_HISTORY:]
        done = [r for r in selected if r["status"] in _DONE]
        keep = {id(r) for r in done[-COMPACT_DONE_ROWS:]}
        selected = [r for r in selected if r["status"] not in _DONE or id(r) in keep]
    requests: Any
    if columns:
        requests = {"columns": list(ROW_COLUMNS), "rows": _row_lists(selected, step)}
        # The compact form also keeps fewer per-request plans (a page's step table
        # shows the latest steps; with 500 running, 256 plans are ~2 MB).
        cut = len(history) - SNAPSHOT_PLAN_STEPS
        history[:cut] = [_without_plan(h) if "plan" in h else h for h in history[:cut]]
    else:
        requests = [{**r, "segments": _segments(r, step)} for r in selected]
    out: SnapshotData = {
        **head,  # type: ignore[typeddict-item]  # mypy asks `head` for blocks, left_out
        "requests": requests,
        "history": history,
        "totals": {**totals, "dropped_rows": dropped_rows, "requests": num_requests},
        "waiting_detail": waiting_detail.copy(),
    }
    if compact or dropped_rows:
        out["left_out"] = {
            "requests": num_requests - len(selected),
            "steps": steps_left_out,
            "from_step": history[0]["step"] if history else max(step, 0),
        }
    return out


def _segments(row: RequestRow, step: int) -> list[Segment]:
    """A copy of the row's segments, open ones closed at `step`. Rows hold scalars and
    these lists: copying them is enough (~10x faster than copy.deepcopy)."""
    segments = [list(seg) for seg in row["segments"]]
    for seg in segments:
        if seg[2] is None:
            seg[2] = max(step, seg[1])
    return segments


def _row_lists(rows: list[RequestRow], step: int) -> list[list[Any]]:
    keys = ROW_COLUMNS[:-1]
    return [[r.get(c) for c in keys] + [_segments(r, step)] for r in rows]


def _without_plan(h: StepSummary) -> StepSummary:
    out = h.copy()
    for key in ("plan", "finished", "preempted_ids"):
        out.pop(key, None)  # type: ignore[misc]
    return out


def step_summary(d: IterationData, t_end: float, accepted: int) -> StepSummary:
    """The step as the history keeps it (the charts and the step table)."""
    step, budget, kv = d["step"], d["budget"], d["kv"]
    return {
        "step": step,
        "t": round(t_end, 6),
        "prefill": budget["prefill"],
        "decode": budget["decode"],
        "max_tokens": budget["max_tokens"],
        "seqs": len(d["scheduled"]),
        "max_seqs": budget["max_seqs"],
        "running": d["queues"]["running_end"],
        "waiting": d["queues"]["waiting_end"],
        "kv_used": kv["used_end"],
        "kv_cached": kv["cached_free"],
        "kv_total": kv["total"],
        "preempted": len(d["preempted"]),
        "plan": {i["req"]: i["n"] for i in d["scheduled"]},
        "updated_step": d.get("updated_step", step),
        "spec": d.get("spec_tokens", 0),
        "accepted": accepted,
        "padding": d.get("padding", 0),
        "finished": [f["req"] for f in d["finished"]],
        "preempted_ids": [p["req"] for p in d["preempted"]],
    }
