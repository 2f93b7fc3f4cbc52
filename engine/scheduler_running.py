"""The RUNNING pass of one step and preemption (vLLM's first loop of `Scheduler.schedule`).

Running requests are scheduled first, in running order; when the pool is short, the
lowest-priority running request is preempted (FCFS: the last one) until the slots fit.
Release differences (engine.releases) read the scheduler's booleans.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.block_pool import KVCacheBlock
from engine.config import SchedulingPolicy
from engine.request import Request, RequestStatus

if TYPE_CHECKING:
    from engine.scheduler import Scheduler
    from engine.scheduler_plan import StepPlan


def schedule_running(sched: Scheduler, plan: StepPlan, threshold: int, defer: bool) -> None:
    """Schedule RUNNING requests into the plan, preempting when the pool is short."""
    kv = sched.kv_cache_manager
    max_model_len = sched.max_model_len
    num_scheduled_tokens = plan.num_scheduled_tokens
    running = sched.running
    req_index = 0
    while req_index < len(running) and plan.token_budget > 0:
        request = running[req_index]
        num_computed = request.num_computed_tokens
        placeholders = request.num_output_placeholders
        # NOTE (async): skip a request whose batches in flight already reach
        # max_tokens even if every draft among them is rejected: no extra step.
        if (
            placeholders
            and num_computed + 2 - placeholders
            >= request.num_prompt_tokens + request.sampling_params.max_tokens
        ) or (defer and request.is_prefill_chunk):
            req_index += 1
            continue
        spec = request.spec_token_ids
        num_new_tokens = len(request.token_ids) + len(spec) + placeholders - num_computed
        if 0 < threshold < num_new_tokens:
            num_new_tokens = threshold
        if num_new_tokens > plan.token_budget:
            num_new_tokens = plan.token_budget
        # The input position never passes max_model_len (drafts included).
        if num_new_tokens > max_model_len - 1 - num_computed:
            num_new_tokens = max_model_len - 1 - num_computed
        if num_new_tokens <= 0:
            req_index += 1
            continue

        new_blocks = kv.allocate_slots(request, num_new_tokens)
        if new_blocks is None:
            new_blocks, req_index = preempt_until_fits(
                sched, plan, request, num_new_tokens, req_index
            )
            if new_blocks is None:
                if sched.priority_continues:
                    # 0.33: it preempted itself; the requests after it may still fit.
                    continue
                break
        plan.scheduled_running.append(request)
        if request.is_prefill_chunk:
            plan.prefill_scheduled = True
        req_id = request.request_id
        num_scheduled_tokens[req_id] = num_new_tokens
        if new_blocks:
            plan.new_blocks_of[req_id] = [b.block_id for b in new_blocks]
        plan.computed_before[req_id] = num_computed
        plan.token_budget -= num_new_tokens
        req_index += 1
        if spec:
            num_spec = num_new_tokens + num_computed - len(request.token_ids) - placeholders
            if num_spec > 0:
                plan.spec_token_ids[req_id] = spec[:num_spec]
            # New drafts arrive in update_draft_token_ids() before the next step.
            request.spec_token_ids = []


def preempt_until_fits(
    sched: Scheduler, plan: StepPlan, request: Request, num_new_tokens: int, req_index: int
) -> tuple[list[KVCacheBlock] | None, int]:
    """The pool is short for `request`: preempt the lowest-priority running request
    (FCFS: the last one), which may be `request` itself, until its slots fit.
    Returns (new blocks or None if `request` was preempted, the updated index)."""
    kv = sched.kv_cache_manager
    running = sched.running
    while True:
        if sched.policy is SchedulingPolicy.PRIORITY:
            victim = max(running, key=lambda r: (r.priority, r.arrival_time))
            victim_index = running.index(victim)
            del running[victim_index]
            scheduled = victim in plan.scheduled_running
            if scheduled:
                # Roll back what was planned for the victim this step.
                plan.unschedule(victim)
            # NOTE: 0.28+ step back for any victim before the current request; before,
            # only for one scheduled this step (an unscheduled one made the scan skip).
            if victim_index < req_index if sched.rewind_by_position else scheduled:
                req_index -= 1
        else:
            victim = running.pop()
        preempt_request(sched, victim)
        plan.preempted.append(victim)
        if victim is request:
            return None, req_index
        new_blocks = kv.allocate_slots(request, num_new_tokens)
        if new_blocks is not None:
            return new_blocks, req_index


def preempt_request(sched: Scheduler, request: Request) -> None:
    """Free the victim's blocks and send it to the front of WAITING to recompute
    (vLLM's `_preempt_request`)."""
    assert request.status == RequestStatus.RUNNING
    sched.tokens_lost[request.request_id] = request.num_computed_tokens
    sched.kv_cache_manager.free(request)
    request.status = RequestStatus.PREEMPTED
    request.num_computed_tokens = 0
    if sched.stale_output:
        # 0.27+: what is in flight arrives as stale output (delivered, no counters).
        request.num_stale_output_tokens = request.num_in_flight_tokens
        request.num_output_placeholders = 0
    # NOTE (0.20): output placeholders stay: tokens of a batch in flight still arrive.
    request.spec_token_ids = []
    request.num_preemptions += 1
    sched.waiting.prepend_request(request)
