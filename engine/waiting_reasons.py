"""Why a waiting request was not admitted this step: the reason codes (the first gate that
held the queue) and how a step's gate becomes each waiting request's reason.

`gate_detail` gives the numbers behind a gate, read from the scheduler when it closed
(a scheduler variant adds its own gates); `engine.waiting` words a code and its detail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.request_queue import RequestQueue
from engine.waiting import WaitingDetail, token_budget_detail

if TYPE_CHECKING:
    from engine.scheduler import Scheduler
    from engine.scheduler_plan import StepPlan

TOKEN_BUDGET = "token_budget"
MAX_NUM_SEQS = "max_num_seqs"
KV_BLOCKS = "kv_blocks"
POLICY_ORDER = "policy_order"
PREEMPTION_THIS_STEP = "preemption_this_step"
NO_CHUNKING_FIT = "no_chunking_fit"
PAUSED = "paused"
STATIC_BATCH = "static_batch"
# Gates of later releases (engine.releases).
MAX_NUM_ACTIVE_SEQS = "max_num_active_seqs"
KV_WATERMARK = "kv_watermark"
PREFILL_THROTTLED = "prefill_throttled"

HEAD_GATES = (KV_BLOCKS, KV_WATERMARK, NO_CHUNKING_FIT)
"""Gates of the head request alone: the requests behind it wait in policy order."""


def waiting_reasons(waiting: RequestQueue, gate: str | None) -> dict[str, str]:
    """Each waiting request's reason, given the gate that stopped the scan (None: the
    token budget, the gate of a scan that never ran out of requests)."""
    if not waiting:
        return {}
    if gate in HEAD_GATES:
        head = waiting.peek_request().request_id
        return {r.request_id: (gate if r.request_id == head else POLICY_ORDER) for r in waiting}
    reason = gate or TOKEN_BUDGET
    return {r.request_id: reason for r in waiting}


def gate_detail(sched: Scheduler, reason: str, plan: StepPlan) -> WaitingDetail:
    """The numbers of a continuous-batching gate, computed when it closed."""
    if reason == TOKEN_BUDGET:
        spec = plan.spec_token_ids
        num_scheduled = plan.num_scheduled_tokens
        decodes = {
            r.request_id
            for r in plan.scheduled_running
            if num_scheduled[r.request_id] == 1 + len(spec.get(r.request_id, ()))
        }
        detail = token_budget_detail(
            sched.max_num_scheduled_tokens, plan.token_budget, num_scheduled, decodes
        )
        detail.update(plan.wait_detail)  # a padded decode that did not fit (0.25+)
        return detail
    if reason == MAX_NUM_SEQS:
        return {"max_num_seqs": sched.max_num_running_reqs, "num_running": len(sched.running)}
    if reason == MAX_NUM_ACTIVE_SEQS:
        return {
            "max_num_active_seqs": sched.max_num_active_reqs,
            "max_num_seqs": sched.max_num_running_reqs,
            "num_running": len(sched.running),
        }
    if reason == PREEMPTION_THIS_STEP:
        return {"num_preempted": len(plan.preempted)}
    if reason in (KV_BLOCKS, KV_WATERMARK, NO_CHUNKING_FIT, PREFILL_THROTTLED):
        return dict(plan.wait_detail)
    return {}
