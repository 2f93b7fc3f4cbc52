"""Static batching, the baseline continuous batching replaced (the article's section 1).

A batch is admitted only when every request of the previous one has left RUNNING. Its
prompts are prefilled whole in one step, padded to the batch's longest (the padding is
computed work that produces nothing), and a member that finishes early keeps its row:
each later step of the batch computes one wasted token for it until the longest member
is done. The budget, seq slots and KV blocks gate admission as in continuous batching,
with the padded prompt tokens counted against the budget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.request import RequestStatus
from engine.scheduler_base import KV_BLOCKS, MAX_NUM_SEQS, STATIC_BATCH, TOKEN_BUDGET

if TYPE_CHECKING:
    from engine.scheduler import Scheduler
    from engine.scheduler_plan import StepPlan


def schedule_waiting_static(sched: Scheduler, plan: StepPlan) -> str | None:
    """Admit the next static batch if the previous one is done. Returns the gate."""
    batch = sched.static_batch
    if sched.running:
        # Only members of the live batch run in static mode.
        return STATIC_BATCH if sched.waiting else None
    batch.clear()
    kv = sched.kv_cache_manager
    waiting = sched.waiting
    longest = 0
    admitted: list[tuple[str, int]] = []
    stop: str | None = None
    while waiting:
        if len(sched.running) == sched.max_num_running_reqs:
            stop = MAX_NUM_SEQS
            break
        request = waiting.peek_request()
        hit_blocks, num_hit = kv.get_computed_blocks(request)
        if request.num_computed_tokens:
            hit_blocks, num_hit = [], 0
        num_computed = request.num_computed_tokens + num_hit
        num_new = request.num_tokens - num_computed
        padded = max(longest, num_new)
        if padded * (len(admitted) + 1) > sched.max_num_scheduled_tokens:
            stop = TOKEN_BUDGET
            break
        if not kv.can_fit_full_sequence(request, hit_blocks):
            stop = KV_BLOCKS
            break
        if kv.allocate_slots(request, num_new, num_hit, hit_blocks) is None:
            stop = KV_BLOCKS
            break
        waiting.pop_request()
        sched.running.append(request)
        req_id = request.request_id
        if request.status == RequestStatus.PREEMPTED:
            plan.resumed_reqs.append(request)
        else:
            plan.new_reqs.append(request)
        plan.num_scheduled_tokens[req_id] = num_new
        plan.new_blocks_of[req_id] = kv.get_block_ids(req_id)
        plan.computed_before[req_id] = num_computed
        plan.prefix_hits[req_id] = num_hit
        request.status = RequestStatus.RUNNING
        request.num_computed_tokens = num_computed
        if request.num_cached_tokens < 0:
            request.num_cached_tokens = num_computed
        longest = padded
        admitted.append((req_id, num_new))
        batch.append(req_id)
    plan.padding = {req_id: longest - n for req_id, n in admitted if longest > n}
    plan.token_budget = sched.max_num_scheduled_tokens - longest * len(admitted)
    return stop


def idle_rows(sched: Scheduler) -> int:
    """Rows of the live static batch whose request already finished (wasted decode)."""
    batch = sched.static_batch
    if not batch or not sched.running:
        return 0
    return sum(1 for req_id in batch if req_id not in sched.requests)
