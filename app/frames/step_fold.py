"""The fold of one `iteration` frame into a SessionState (app.frames.fold): the rows of
the requests it scheduled, preempted, sampled and finished, the block map, the latency
samples, and the step's summary in the history."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.frames.rows import close_open
from protocol.codes import Phase, RequestStatus, SegmentKind
from protocol.views import StepSummary
from protocol.wire import IterationData

if TYPE_CHECKING:
    from app.frames.fold import SessionState

# Plain strings: the fold runs for every frame, and reading an enum member off its class
# costs ~200 ns in Python 3.11 (a global: ~35 ns).
RUNNING, PREEMPTED, FINISHED = (
    RequestStatus.RUNNING.value, RequestStatus.PREEMPTED.value, RequestStatus.FINISHED.value
)  # fmt: skip
DECODE = Phase.DECODE.value
SEG_PREEMPTED = SegmentKind.PREEMPTED.value

PLAN_STEPS = 256
"""Only the latest steps keep their full plan ({req: n}) in the history (the step table)."""


def fold_iteration(state: SessionState, d: IterationData) -> None:
    step = d["step"]
    state.step = step
    t_end = round(d["t_start"] + d["duration"], 6)  # µs: no float noise in checkpoints
    state.t = t_end
    totals = state.totals
    totals["steps"] += 1
    totals["scheduled_tokens"] += d["budget"]["used"]
    for req in d["arrived"]:
        state.row(req)
    for item in d["scheduled"]:
        row = state.row(item["req"])
        if row["status"] != RUNNING:
            close_open(row, step)
            row["status"] = RUNNING
            if row["first_scheduled_step"] is None:
                row["first_scheduled_step"] = step
                row["prefix_hit"] = item["prefix_hit"]
            totals["prefix_hit_tokens"] += item["prefix_hit"]
        row["waiting_reason"] = None
        row["num_computed_tokens"] = item["start"] + item["n"]
        if item.get("spec"):
            row["num_draft_tokens"] = row.get("num_draft_tokens", 0) + item["spec"]
        segs = row["segments"]
        last = segs[-1] if segs else None
        if (
            item["phase"] == DECODE
            and last is not None
            and last[0] == DECODE
            and last[2] == step - 1
        ):
            last[2] = step
            last[3] += item["n"]
        else:
            segs.append([item["phase"], step, step, item["n"]])
    for p in d["preempted"]:
        row = state.row(p["req"])
        row["status"] = PREEMPTED
        row["num_preemptions"] += 1
        row["num_computed_tokens"] = 0
        row["segments"].append([SEG_PREEMPTED, step, None, p["tokens_lost"]])
        totals["preemptions"] += 1
    appended = d.get("appended", {})
    latencies = state.latencies
    for req in d["sampled"]:
        row = state.row(req)
        n = appended.get(req, 1)
        row["num_tokens"] += n
        totals["output_tokens"] += n
        latencies.token(req, t_end)
        row["last_token_t"] = t_end
    for f in d["finished"]:
        row = state.row(f["req"])
        row["status"], row["finish_reason"] = FINISHED, f["reason"]
        row["finish_step"] = step
        # The request's own `finished` mark follows with the same time; until it is
        # folded the row is finished already, so it has its finish time too.
        row["finish_t"] = t_end
    requests = state.requests
    for req, reason in d["waiting_reasons"].items():
        waiting_row = requests.get(req)
        if waiting_row is not None:
            waiting_row["waiting_reason"] = reason
    state.waiting_detail = d.get("waiting_detail", {})
    accepted = d.get("accepted", {})
    for req, n in accepted.items():
        acc_row = requests.get(req)
        if acc_row is not None:
            acc_row["num_accepted_tokens"] = acc_row.get("num_accepted_tokens", 0) + n
    placeholders = d.get("placeholders", {})
    for req in state.in_flight - placeholders.keys():
        ph_row = requests.get(req)
        if ph_row is not None:
            ph_row["placeholders"] = 0
    for req, n in placeholders.items():
        state.row(req)["placeholders"] = n
    state.in_flight = set(placeholders)
    kv = d["kv"]
    state.blocks.apply(d["blocks"], kv["total"])
    state.kv_peak = max(state.kv_peak, kv["used"])
    state.simulated = d["simulated"]
    history = state.history
    if len(history) >= PLAN_STEPS:
        # Older steps keep their totals for the charts, not their per-request plan.
        old = history[-PLAN_STEPS]
        old.pop("plan", None)
        old.pop("finished", None)
        old.pop("preempted_ids", None)
    history.append(step_summary(d, t_end, sum(accepted.values())))


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
