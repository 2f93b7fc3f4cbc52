"""What a SessionState shows: the snapshot a late joiner gets (docs/protocol.md), the
request table's rows and the latency summary. Plain data built from the fold's state;
nothing here changes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from protocol.codes import RequestStatus
from protocol.views import (
    ROW_COLUMNS,
    LatencySummary,
    Quantiles,
    RequestRow,
    Segment,
    SnapshotData,
    StepSummary,
    TableRow,
)

__all__ = ["ROW_COLUMNS", "build", "latency_summary", "request_rows"]

if TYPE_CHECKING:
    from app.frames.fold import SessionState

COMPACT_HISTORY = 128
COMPACT_DONE_ROWS = 100
"""A compact snapshot (a client that fell behind): the latest COMPACT_HISTORY steps and
COMPACT_DONE_ROWS finished or rejected rows."""


SNAPSHOT_PLAN_STEPS = 64
"""Steps whose plan a columns snapshot keeps (a plain one keeps PLAN_STEPS)."""

_DONE = (RequestStatus.FINISHED.value, RequestStatus.REJECTED.value)


def build(
    state: SessionState, compact: bool = False, columns: bool = False, with_blocks: bool = True
) -> SnapshotData:
    """The state for a late joiner (docs/protocol.md). `compact`: only the latest
    COMPACT_HISTORY steps and COMPACT_DONE_ROWS finished or rejected rows (a client that
    fell behind). `totals` count the whole session whatever was left out (`requests`:
    every request it has had); `left_out` says what a compact
    snapshot, or the state's own bound on finished rows, left out (the rest is in the
    recording). `columns`: `requests` as `{"columns": [...], "rows": [[...], ...]}` (a
    quarter of the bytes, faster to encode and parse for a 10,000-request session)."""
    selected = list(state.requests.values())
    history = list(state.history)
    steps_left_out = 0
    if compact:
        steps_left_out = max(len(history) - COMPACT_HISTORY, 0)
        history = history[-COMPACT_HISTORY:]
        done = [r for r in selected if r["status"] in _DONE]
        keep = {id(r) for r in done[-COMPACT_DONE_ROWS:]}
        selected = [r for r in selected if r["status"] not in _DONE or id(r) in keep]
    num_requests = len(state.requests) + state.dropped_rows
    requests: Any
    if columns:
        requests = {"columns": list(ROW_COLUMNS), "rows": _row_lists(selected, state.step)}
        # The compact form also keeps fewer per-request plans (a page's step table
        # shows the latest steps; with 500 running, 256 plans are ~2 MB).
        cut = len(history) - SNAPSHOT_PLAN_STEPS
        history[:cut] = [_without_plan(h) if "plan" in h else h for h in history[:cut]]
    else:
        requests = [{**r, "segments": _segments(r, state.step)} for r in selected]
    out: SnapshotData = {
        "session": state.session,
        "meta": dict(state.meta),
        "seq": state.seq,
        "step": state.step,
        "t": state.t,
        "config": dict(state.config),
        "config_version": state.config_version,
        "config_marks": list(state.config_marks),
        "paused": state.paused,
        "simulated": state.simulated,
        "requests": requests,
        "history": history,
        "totals": {
            **state.totals,
            "dropped_rows": state.dropped_rows,
            "requests": num_requests,
        },
        "waiting_detail": state.waiting_detail.copy(),
    }
    if compact or state.dropped_rows:
        out["left_out"] = {
            "requests": num_requests - len(selected),
            "steps": steps_left_out,
            "from_step": history[0]["step"] if history else max(state.step, 0),
        }
    if with_blocks:
        out["blocks"] = state.blocks.rows()
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


def request_rows(state: SessionState) -> list[TableRow]:
    """Table rows (no Gantt segments, no copy of history): each request with TTFT and
    mean ITL in seconds, None until known. The JSON twin of the request table."""
    rows = []
    for r in state.requests.values():
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
        rows.append(row)
    return rows


def latency_summary(state: SessionState) -> LatencySummary:
    """Quantiles of the latest latency samples, throughput and totals."""
    elapsed = max(state.t, 1e-9)
    samples = state.latency_samples()
    return {
        "ttft": _quantiles(samples["ttft"]),
        "itl": _quantiles(samples["itl"]),
        "queue": _quantiles(samples["queue"]),
        "e2e": _quantiles(samples["e2e"]),
        "finished": len(samples["e2e"]),
        "throughput_tok_s": round(state.totals["output_tokens"] / elapsed, 3),
        "preemptions": state.totals["preemptions"],
        "kv_peak": state.kv_peak,
        "steps": state.totals["steps"],
    }


def _quantiles(values: list[float]) -> Quantiles:
    if not values:
        return {"p50": None, "p95": None, "p99": None}
    ordered = sorted(values)
    last = len(ordered) - 1

    def q(p: float) -> float:
        return round(ordered[min(last, round(p * last))], 6)

    return {"p50": q(0.50), "p95": q(0.95), "p99": q(0.99)}
