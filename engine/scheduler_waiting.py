"""The WAITING scan of one step: admit requests by policy while the token budget, the
sequence slots and the KV blocks allow (vLLM's second loop of `Scheduler.schedule`).

Release differences (engine.releases) read the scheduler's booleans: the admission cap
`max_num_active_seqs`, the KV `watermark`, prefill throttling, the padding of a new decode
to 1 + K tokens under speculative decoding, and when prefix-cache stats are counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.block_pool import KVCacheBlock
from engine.faults import SchedulerAssertion
from engine.outputs import PAD_DRAFT
from engine.request import Request, RequestStatus
from engine.waiting_reasons import (
    KV_BLOCKS,
    KV_WATERMARK,
    MAX_NUM_ACTIVE_SEQS,
    MAX_NUM_SEQS,
    NO_CHUNKING_FIT,
    PREFILL_THROTTLED,
    TOKEN_BUDGET,
)

if TYPE_CHECKING:
    from engine.scheduler import Scheduler
    from engine.scheduler_plan import StepPlan


def schedule_waiting(
    sched: Scheduler, plan: StepPlan, threshold: int, defer: bool, skipped: list[Request]
) -> str | None:
    """Admit WAITING requests. Returns the gate that stopped the scan (None: the queue was
    emptied). Requests passed over (stale output in flight) are popped into `skipped`."""
    kv = sched.kv_cache_manager
    waiting = sched.waiting
    caching = kv.enable_caching
    at_admission = sched.stats_at_admission
    max_active = sched.max_num_active_reqs
    while waiting:
        if plan.token_budget <= 0:
            return TOKEN_BUDGET
        if len(sched.running) >= max_active:
            return MAX_NUM_SEQS if max_active == sched.max_num_running_reqs else MAX_NUM_ACTIVE_SEQS
        request = waiting.peek_request()
        if request.num_stale_output_tokens:
            # 0.27+: its batch in flight still delivers; resuming now could resample it.
            skipped.append(waiting.pop_request())
            sched.deferred_waiting.add(request)
            continue
        looked_up = request.num_computed_tokens == 0
        if looked_up:
            hit_blocks, num_hit_tokens = kv.get_computed_blocks(request)
            if caching and not at_admission and not request.num_preemptions:
                # 0.20: every lookup counts, admitted or not.
                plan.prefix_cache_queries += request.num_tokens
                plan.prefix_cache_hits += num_hit_tokens
        else:
            hit_blocks, num_hit_tokens = [], 0
        num_computed = request.num_computed_tokens + num_hit_tokens
        if defer and num_computed < request.num_tokens - 1:
            plan.wait_detail = _throttle_detail(sched)
            return PREFILL_THROTTLED
        # num_tokens, not the prompt: a resumed request recomputes its outputs too.
        num_new_tokens = request.num_tokens - num_computed
        padded = False
        if (
            sched.pad_new_decodes
            and num_new_tokens == 1
            and not plan.prefill_scheduled
            and (plan.scheduled_running or (num_computed > 0 and sched.pad_with_room))
        ):
            # Speculative decoding: a new decode is padded to the uniform 1 + K tokens.
            size = 1 + sched.num_spec_tokens
            if sched.pad_with_room:
                # 0.30+: padded only with room for the sampled token, else it runs unpadded.
                fits = num_computed + size + 1 <= sched.max_model_len
            else:
                # 0.25 .. 0.29: one that would pass max_model_len padded waits.
                fits = True
                if num_computed + size > sched.max_model_len:
                    plan.wait_detail = {"padded_tokens": size, "budget_left": plan.token_budget}
                    return TOKEN_BUDGET
            if fits:
                if size > plan.token_budget:
                    plan.wait_detail = {"padded_tokens": size, "budget_left": plan.token_budget}
                    return TOKEN_BUDGET
                num_new_tokens = size
                padded = True
        if 0 < threshold < num_new_tokens:
            num_new_tokens = threshold
        num_new_tokens_uncut = num_new_tokens
        num_new_tokens = min(num_new_tokens, plan.token_budget)
        if not sched.enable_chunked_prefill and num_new_tokens_uncut > plan.token_budget:
            plan.wait_detail = {
                "tokens_needed": num_new_tokens_uncut,
                "budget_left": plan.token_budget,
            }
            return NO_CHUNKING_FIT
        watermark = sched.watermark_blocks if sched.running else 0
        if sched.scheduler_reserve_full_isl and not kv.can_fit_full_sequence(
            request, hit_blocks, watermark
        ):
            return _kv_gate(sched, plan, request, request.num_tokens, hit_blocks, True, watermark)
        if (
            kv.allocate_slots(request, num_new_tokens, num_hit_tokens, hit_blocks, watermark)
            is None
        ):
            num_tokens = num_computed + num_new_tokens
            return _kv_gate(sched, plan, request, num_tokens, hit_blocks, False, watermark)

        if padded and num_new_tokens != 1 + sched.num_spec_tokens:
            # vLLM accepts this configuration and fails here, its slots already allocated.
            raise SchedulerAssertion(
                sched.current_step,
                "num_new_tokens == 1 + self.num_spec_tokens",
                f"request {request.request_id}, a new decode padded to "
                f"{1 + sched.num_spec_tokens} tokens, was cut to {num_new_tokens} by "
                f"long_prefill_token_threshold {threshold}",
            )
        admit(sched, plan, num_new_tokens, num_computed, num_hit_tokens)
        plan.token_budget -= num_new_tokens
        if looked_up and caching and at_admission and not request.num_preemptions:
            # 0.27+: only admitted requests count.
            plan.prefix_cache_queries += request.num_tokens
            plan.prefix_cache_hits += num_hit_tokens
        if num_computed < request.num_tokens - 1:
            plan.prefill_admitted = True
        if padded:
            plan.spec_token_ids[request.request_id] = [PAD_DRAFT] * sched.num_spec_tokens
    return None


def admit(
    sched: Scheduler, plan: StepPlan, num_new_tokens: int, num_computed: int, num_hit: int
) -> Request:
    """Move the head of WAITING to RUNNING with its slots allocated: `num_computed` tokens
    done (`num_hit` of them prefix-cache hits), `num_new_tokens` scheduled this step.
    The caller charges the token budget."""
    request = sched.waiting.pop_request()
    if sched.deferred_waiting:
        sched.deferred_waiting.discard(request)
    sched.running.append(request)
    if request.status == RequestStatus.PREEMPTED:
        plan.resumed_reqs.append(request)
    else:
        plan.new_reqs.append(request)
    req_id = request.request_id
    plan.num_scheduled_tokens[req_id] = num_new_tokens
    plan.new_blocks_of[req_id] = sched.kv_cache_manager.get_block_ids(req_id)
    plan.computed_before[req_id] = num_computed
    plan.prefix_hits[req_id] = num_hit
    request.status = RequestStatus.RUNNING
    request.num_computed_tokens = num_computed
    if request.num_cached_tokens < 0:
        request.num_cached_tokens = num_computed
    return request


def _kv_gate(
    sched: Scheduler,
    plan: StepPlan,
    request: Request,
    num_tokens: int,
    hit_blocks: list[KVCacheBlock],
    full_sequence: bool,
    watermark: int,
) -> str:
    """The KV gate held the head request: kv_watermark if it would have fit without the
    watermark, else kv_blocks. Records the numbers."""
    kv = sched.kv_cache_manager
    pool = kv.block_pool
    needed = kv.num_blocks_needed(request, num_tokens, hit_blocks)
    free = pool.get_num_free_blocks()
    plan.wait_detail = {
        "blocks_needed": needed,
        "blocks_free": free,
        "blocks_used": pool.get_num_used_blocks(),
        "blocks_usable": pool.num_usable_blocks,
        "full_sequence": full_sequence,
    }
    if watermark:
        plan.wait_detail["watermark_blocks"] = watermark
        if needed <= free:
            return KV_WATERMARK
    return KV_BLOCKS


def _throttle_detail(sched: Scheduler) -> dict[str, int | bool]:
    cadence = sched.cadence
    held = cadence.steps_held() if cadence.held() else 0
    return {
        "prefill_schedule_interval": cadence.interval,
        "steps_held": held,
        "until_step": sched.current_step + held,
        "throttled_by_coordinator": not held,
    }
