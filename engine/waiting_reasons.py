"""Why a waiting request was not admitted this step: the reason codes (the first gate that
held the queue) and how a step's gate becomes each waiting request's reason.

`gate_detail` gives the numbers behind a gate, from the step's plan and the scheduler's
limits when it closed (a scheduler variant adds its own gates); `engine.waiting` words a
code and its detail.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.reasons import NO_WAITING, WaitingReasons
from engine.request_queue import RequestQueue
from engine.step_plan import StepPlan
from engine.waiting import token_budget_detail
from protocol.codes import (  # the codes are the protocol's (one definition)
    CACHE_AWARE_ORDER,
    HEAD_GATES,
    KV_BLOCKS,
    KV_WATERMARK,
    MAX_NUM_ACTIVE_SEQS,
    MAX_NUM_SEQS,
    NO_CHUNKING_FIT,
    PAUSED,
    POLICY_ORDER,
    PREEMPTION_THIS_STEP,
    PREFILL_THROTTLED,
    STATIC_BATCH,
    TOKEN_BUDGET,
)
from protocol.wire import WaitingDetail

__all__ = [
    "CACHE_AWARE_ORDER",
    "KV_BLOCKS",
    "KV_WATERMARK",
    "MAX_NUM_ACTIVE_SEQS",
    "MAX_NUM_SEQS",
    "NO_CHUNKING_FIT",
    "NO_WAITING",
    "PAUSED",
    "POLICY_ORDER",
    "PREEMPTION_THIS_STEP",
    "PREFILL_THROTTLED",
    "STATIC_BATCH",
    "TOKEN_BUDGET",
    "WaitingReasons",
    "gate_detail",
    "waiting_reasons",
]


def waiting_reasons(
    waiting: RequestQueue, gate: str | None, passed_over: Iterable[str] = ()
) -> WaitingReasons:
    """The waiting requests' reasons, given the gate that stopped the scan (None: the
    token budget, the gate of a scan that never ran out of requests). Under a gate of the
    head alone (HEAD_GATES) the head has the gate and the others wait `policy_order`.
    `passed_over`: requests still waiting that cache-aware admission moved back this
    step (0.34+): that is their reason (cache_aware_order; the step's gate stays in the
    waiting detail)."""
    if not waiting:
        return NO_WAITING
    exceptions: dict[str, str] = {}
    if gate in HEAD_GATES:
        default: str = POLICY_ORDER
        exceptions[waiting.peek_request().request_id] = str(gate)
    else:
        default = gate or TOKEN_BUDGET
    for req_id in passed_over:
        exceptions[req_id] = CACHE_AWARE_ORDER
    return WaitingReasons(default, exceptions)


def gate_detail(
    reason: str,
    plan: StepPlan,
    max_num_scheduled_tokens: int,
    max_num_seqs: int,
    max_num_active_seqs: int,
    num_running: int,
) -> WaitingDetail:
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
            max_num_scheduled_tokens, plan.token_budget, num_scheduled, decodes
        )
        detail.update(plan.wait_detail)  # a padded decode that did not fit (0.25+)
        return detail
    if reason == MAX_NUM_SEQS:
        return {"max_num_seqs": max_num_seqs, "num_running": num_running}
    if reason == MAX_NUM_ACTIVE_SEQS:
        return {
            "max_num_active_seqs": max_num_active_seqs,
            "max_num_seqs": max_num_seqs,
            "num_running": num_running,
        }
    if reason == PREEMPTION_THIS_STEP:
        return {"num_preempted": len(plan.preempted)}
    if reason in (KV_BLOCKS, KV_WATERMARK, NO_CHUNKING_FIT, PREFILL_THROTTLED):
        return WaitingDetail(**plan.wait_detail)
    return {}
