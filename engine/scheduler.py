"""vLLM v1's scheduler: schedule() makes a step's plan, update_from_output() applies the
runner's result; with `async_scheduling` it is vLLM's AsyncScheduler (output placeholders).

There is no prefill phase and no decode phase: every request has `num_tokens_with_spec`
(+ output placeholders under async scheduling) and `num_computed_tokens`, and each step
hands out token budget so the second catches up with the first (chunked prefill, prefix
hits, decodes, drafts and recompute are all "deficit").

The class reads in vLLM's order: schedule() with its RUNNING pass (and preemption), its
WAITING scan (and the KV gate), `_update_after_schedule`, then `update_from_output`,
`update_draft_token_ids` and the request bookkeeping. What needs only numbers lives in its
own noun: the plan being built (engine.step_plan), the checks against the config
(engine.config_checks), the reason codes and their details (engine.waiting_reasons,
engine.waiting), prefill throttling (engine.prefill_cadence). Release differences
(engine.releases) are read as booleans set in `_apply_scheduler_config`. A variant
overrides the methods marked "hook" (engine.static_batching does).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import ClassVar

from engine.block_pool import KVCacheBlock
from engine.config import BatchingMode, EngineConfig, SchedulingPolicy
from engine.config_checks import check_config_change, check_kv_block_limit, rejection_reason
from engine.faults import SchedulerAssertion
from engine.kv_cache_manager import KVCacheManager
from engine.outputs import (
    PAD_DRAFT,
    ModelRunnerOutput,
    ScheduledChunk,
    SchedulerOutput,
    UpdateResult,
)
from engine.prefill_cadence import PrefillCadence
from engine.releases import ReleaseFeatures, release_features
from engine.request import Request, RequestStatus
from engine.request_queue import RequestQueue, create_request_queue
from engine.step_plan import StepPlan
from engine.stop import check_stop
from engine.waiting_reasons import (
    KV_BLOCKS,
    KV_WATERMARK,
    MAX_NUM_ACTIVE_SEQS,
    MAX_NUM_SEQS,
    NO_CHUNKING_FIT,
    PAUSED,
    PREEMPTION_THIS_STEP,
    PREFILL_THROTTLED,
    TOKEN_BUDGET,
    gate_detail,
    waiting_reasons,
)
from protocol.wire import WaitingDetail


class Scheduler:
    batching: ClassVar[BatchingMode] = BatchingMode.CONTINUOUS
    """The `batching` mode this class runs (engine.schedulers picks the class)."""

    def __init__(self, config: EngineConfig, features: ReleaseFeatures | None = None) -> None:
        config.validate()
        if config.scheduler.batching is not self.batching:
            raise ValueError(
                f"{type(self).__name__} runs {self.batching.value} batching, the config asks "
                f"for {config.scheduler.batching.value} (use engine.schedulers.create_scheduler)"
            )
        self.features = features = features or release_features(config.vllm_version)
        """The release's behaviour changes as booleans, computed once (engine.releases);
        `features` given: a release with some changes reverted (which change explains a
        difference between two releases, app.records.first_difference)."""
        self.kv_cache_manager = KVCacheManager(
            num_gpu_blocks=config.cache.num_gpu_blocks,
            block_size=config.cache.block_size,
            max_model_len=config.scheduler.max_model_len,
            enable_caching=config.cache.enable_prefix_caching,
            unhashed_first=features.unhashed_blocks_reused_first,
        )
        self.requests: dict[str, Request] = {}
        self.running: list[Request] = []
        self.waiting: RequestQueue = create_request_queue(config.scheduler.policy)
        # Finished since the last schedule() (aborts, and stops applied in update).
        self.finished_req_ids: set[str] = set()
        self.paused = False
        self.tokens_lost: dict[str, int] = {}
        """Preempted this step: the computed tokens each victim lost."""
        self.deferred_waiting: set[Request] = set()
        """vLLM 0.31+: waiting requests a scan skipped (stale output still in flight)."""
        self.cadence = PrefillCadence(config.scheduler.prefill_schedule_interval)
        self.current_step = 0
        """The engine step being scheduled (for waiting details)."""
        self.config = config
        self._apply_scheduler_config(config)

    def _apply_scheduler_config(self, config: EngineConfig) -> None:
        sc = config.scheduler
        self.max_num_running_reqs = sc.max_num_seqs
        self.max_num_scheduled_tokens = sc.max_num_batched_tokens
        self.max_model_len = sc.max_model_len
        self.long_prefill_token_threshold = sc.long_prefill_token_threshold
        self.enable_chunked_prefill = sc.enable_chunked_prefill
        self.scheduler_reserve_full_isl = sc.scheduler_reserve_full_isl
        self.policy = sc.policy
        self.async_scheduling = sc.async_scheduling
        self.num_spec_tokens = sc.num_speculative_tokens
        # Later releases (engine.releases): booleans and numbers for the hot paths.
        f = self.features
        self.lone_request_uncapped = f.lone_request_uncapped
        # 0.34+: without chunked prefill the threshold caps nothing.
        self.threshold_off = f.threshold_needs_chunked_prefill and not sc.enable_chunked_prefill
        self.threshold_adaptive = sc.long_prefill_token_threshold_adaptive
        self.max_num_active_reqs = sc.max_num_active_seqs or sc.max_num_seqs
        self.watermark_blocks = int(sc.watermark * config.cache.num_gpu_blocks)
        self.cadence.interval = sc.prefill_schedule_interval
        self.pad_new_decodes = f.spec_pads_new_decodes and self.num_spec_tokens > 0
        self.pad_with_room = f.spec_pads_resumed_decodes
        # 0.34+: cache-aware admission consults the prefix cache and reorders a FCFS queue.
        self.cache_aware_window = (
            sc.cache_aware_admission_window
            if self.policy is SchedulingPolicy.FCFS and config.cache.enable_prefix_caching
            else 0
        )
        self.cache_aware_threshold = sc.cache_aware_admission_threshold
        self.priority_continues = (
            f.priority_self_preemption_continues and self.policy is SchedulingPolicy.PRIORITY
        )
        self.rewind_by_position = f.preemption_rewinds_by_position
        self.track_in_flight = f.in_flight_caching
        # Stale output is counted from the in-flight tokens (0.27 builds on 0.26).
        self.stale_output = f.stale_output_after_preemption and self.track_in_flight
        self.stop_rolls_back = f.stop_rolls_back_computed
        self.stats_at_admission = f.prefix_stats_at_admission
        # Blocks are cached when an output arrives: async always, sync with drafts (0.33).
        self.cache_after_output = self.async_scheduling or (
            f.sync_spec_caches_after_output and self.num_spec_tokens > 0
        )

    # ================================================================ schedule
    def schedule(
        self,
        step: int = 0,
        late_tokens: dict[str, list[int]] | None = None,
        throttle_prefills: bool = False,
    ) -> SchedulerOutput:
        """Plan one step: the RUNNING requests first, then (if nothing was preempted) the
        WAITING ones. `late_tokens` (async scheduling): tokens the batches in flight
        sampled, per request, which the chunks' input ids need past the known tokens.
        `throttle_prefills` (vLLM 0.24+): a data-parallel coordinator's off-cadence step."""
        if throttle_prefills and not self.features.throttle_prefills:
            raise ValueError(f"vLLM {self.config.vllm_version} has no throttle_prefills")
        self.current_step = step
        num_running_before = len(self.running)
        plan = StepPlan(0 if self.paused else self.max_num_scheduled_tokens)
        threshold = self._step_threshold()
        defer = self.cadence.defer(throttle_prefills, self.running)
        self._schedule_running(plan, threshold, defer)
        # Next, the WAITING requests, unless something was preempted this step.
        if self.paused:
            stop_reason: str | None = PAUSED
        elif plan.preempted:
            stop_reason = PREEMPTION_THIS_STEP
        else:
            if self.cache_aware_window and not defer:
                self._reorder_waiting_by_cached_prefix(plan)
            stop_reason = self._schedule_waiting(plan, threshold, defer)
        assert plan.token_budget >= 0
        # (max_num_seqs lowered live below the running count: those run on, none is admitted)
        assert len(self.running) <= max(self.max_num_running_reqs, num_running_before)
        total = sum(plan.num_scheduled_tokens.values())
        self.cadence.after_step(total, plan.prefill_scheduled or plan.prefill_admitted)

        kv_used = self.kv_cache_manager.block_pool.get_num_used_blocks()
        preempted = plan.preempted
        passed_over = [
            r for r in plan.passed_over if self.requests[r].status != RequestStatus.RUNNING
        ]
        reasons = waiting_reasons(self.waiting, stop_reason, passed_over)
        waiting_detail = self._waiting_detail(stop_reason, plan) if reasons else {}
        # The plan above was built from the old num_computed_tokens; advance them now.
        self._update_after_schedule(plan)
        output = SchedulerOutput(
            step=step,
            chunks=plan.make_chunks(self.requests, late_tokens),
            total_num_scheduled_tokens=total,
            new_req_ids=tuple(r.request_id for r in plan.new_reqs),
            resumed_req_ids=tuple(r.request_id for r in plan.resumed_reqs),
            preempted_req_ids=tuple(r.request_id for r in preempted),
            preempted_tokens_lost=tuple(self.tokens_lost.pop(r.request_id) for r in preempted),
            finished_req_ids=tuple(self.finished_req_ids),
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            kv_blocks_used=kv_used,
            waiting_reasons=reasons,
            waiting_detail=waiting_detail,
            sampling_params={
                r.request_id: r.sampling_params for r in plan.new_reqs + plan.resumed_reqs
            },
            num_spec_tokens=sum(len(s) for s in plan.spec_token_ids.values()),
            num_padding_tokens=self._num_padding_tokens(plan),
            prefix_cache_queries=plan.prefix_cache_queries,
            prefix_cache_hits=plan.prefix_cache_hits,
        )
        self.finished_req_ids = set()
        return output

    def _step_threshold(self) -> int:
        """This step's long_prefill_token_threshold (0 = no cap)."""
        threshold = 0 if self.threshold_off else self.long_prefill_token_threshold
        if not threshold or not self.lone_request_uncapped:
            return threshold
        # 0.31+: a request alone has nobody to starve.
        num_eligible = len(self.running) + len(self.waiting)
        if num_eligible <= 1:
            return 0
        if self.threshold_adaptive:
            return max(threshold, self.max_num_scheduled_tokens // num_eligible)
        return threshold

    # ------------------------------------------------------------ RUNNING pass
    def _schedule_running(self, plan: StepPlan, threshold: int, defer: bool) -> None:
        """Schedule RUNNING requests in running order, preempting when the pool is short."""
        # (per request per step: the checks stay inline, as in vLLM's loop)
        max_model_len = self.max_model_len
        running = self.running
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
            num_new_tokens = (
                request.num_tokens + len(request.spec_token_ids) + placeholders - num_computed
            )
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
            new_blocks = self.kv_cache_manager.allocate_slots(request, num_new_tokens)
            if new_blocks is None:
                new_blocks, req_index = self._preempt_until_fits(
                    plan, request, num_new_tokens, req_index
                )
                if new_blocks is None:
                    if self.priority_continues:
                        # 0.33: it preempted itself; the requests after it may still fit.
                        continue
                    break
            self._plan_running(plan, request, num_new_tokens, new_blocks)
            req_index += 1

    def _plan_running(
        self,
        plan: StepPlan,
        request: Request,
        num_new_tokens: int,
        new_blocks: list[KVCacheBlock],
    ) -> None:
        """Put a running request's `num_new_tokens` (its slots allocated) into the plan."""
        plan.scheduled_running.append(request)
        if request.is_prefill_chunk:
            plan.prefill_scheduled = True
        req_id = request.request_id
        num_computed = request.num_computed_tokens
        plan.num_scheduled_tokens[req_id] = num_new_tokens
        if new_blocks:
            plan.new_blocks_of[req_id] = [b.block_id for b in new_blocks]
        plan.computed_before[req_id] = num_computed
        plan.token_budget -= num_new_tokens
        spec = request.spec_token_ids
        if spec:
            num_spec = (
                num_new_tokens + num_computed - request.num_tokens - request.num_output_placeholders
            )
            if num_spec > 0:
                plan.spec_token_ids[req_id] = spec[:num_spec]
            # New drafts arrive in update_draft_token_ids() before the next step.
            request.spec_token_ids = []

    def _preempt_until_fits(
        self, plan: StepPlan, request: Request, num_new_tokens: int, req_index: int
    ) -> tuple[list[KVCacheBlock] | None, int]:
        """The pool is short for `request`: preempt the lowest-priority running request
        (FCFS: the last one), which may be `request` itself, until its slots fit.
        Returns (new blocks or None if `request` was preempted, the updated index)."""
        running = self.running
        while True:
            if self.policy is SchedulingPolicy.PRIORITY:
                victim = max(running, key=lambda r: (r.priority, r.arrival_time))
                victim_index = running.index(victim)
                del running[victim_index]
                scheduled = victim in plan.scheduled_running
                if scheduled:
                    # Roll back what was planned for the victim this step.
                    plan.unschedule(victim)
                # NOTE: 0.28+ step back for any victim before the current request; before,
                # only for one scheduled this step (an unscheduled one made the scan skip).
                if victim_index < req_index if self.rewind_by_position else scheduled:
                    req_index -= 1
            else:
                victim = running.pop()
            self._preempt_request(victim)
            plan.preempted.append(victim)
            if victim is request:
                return None, req_index
            new_blocks = self.kv_cache_manager.allocate_slots(request, num_new_tokens)
            if new_blocks is not None:
                return new_blocks, req_index

    # ------------------------------------------------------------- WAITING scan
    def _reorder_waiting_by_cached_prefix(self, plan: StepPlan) -> None:
        """0.34+ cache-aware admission: within the first `cache_aware_window` waiting
        requests, the fresh ones (never computed, not preempted) are reordered by how much
        of their prompt the prefix cache holds, deepest first (arrival breaks ties), once
        KV usage has reached `cache_aware_admission_threshold`. Requests in other states
        keep their places. Who moved ahead, how deep its cached prefix is, and who it
        passed go into the plan (the waiting reasons name them)."""
        waiting = self.waiting
        kv = self.kv_cache_manager
        if len(waiting) < 2 or kv.block_pool.get_usage() < self.cache_aware_threshold:
            return
        head = list(itertools.islice(waiting, self.cache_aware_window))
        slots = [
            i
            for i, r in enumerate(head)
            if r.status == RequestStatus.WAITING and not r.num_computed_tokens
        ]
        if len(slots) < 2:
            return
        cached = {i: kv.get_computed_blocks(head[i])[1] for i in slots}
        order = sorted(slots, key=lambda i: (-cached[i], i))
        if order == slots:
            return
        reordered = list(head)
        for slot, source in zip(slots, order, strict=True):
            reordered[slot] = head[source]
        waiting.remove_requests(head)
        for request in reversed(reordered):
            waiting.prepend_request(request)
        ahead = next(source for slot, source in zip(slots, order, strict=True) if source > slot)
        plan.cache_aware = {
            "cache_aware_ahead": head[ahead].request_id,
            "cache_aware_cached_tokens": cached[ahead],
            "cache_aware_window": self.cache_aware_window,
        }
        plan.passed_over = {
            head[source].request_id
            for slot, source in zip(slots, order, strict=True)
            if source < slot
        }

    def _schedule_waiting(self, plan: StepPlan, threshold: int, defer: bool) -> str | None:
        """Hook: admit WAITING requests into the plan. Returns the gate that stopped the
        scan (None: the queue was emptied)."""
        skipped: list[Request] = []
        stop = self._scan_waiting(plan, threshold, defer, skipped)
        for request in reversed(skipped):  # the first one skipped ends up in front
            self.waiting.prepend_request(request)
        if not defer:
            self.cadence.after_admission(len(self.waiting) - len(self.deferred_waiting))
        return stop

    def _scan_waiting(
        self, plan: StepPlan, threshold: int, defer: bool, skipped: list[Request]
    ) -> str | None:
        """Admit requests by policy while the token budget, the sequence slots and the KV
        blocks allow. Returns the gate that stopped the scan (None: the queue was emptied).
        Requests passed over (stale output in flight) are popped into `skipped`."""
        waiting = self.waiting
        max_active = self.max_num_active_reqs
        while waiting:
            if plan.token_budget <= 0:
                return TOKEN_BUDGET
            if len(self.running) >= max_active:
                if max_active == self.max_num_running_reqs:
                    return MAX_NUM_SEQS
                return MAX_NUM_ACTIVE_SEQS
            request = waiting.peek_request()
            if request.num_stale_output_tokens:
                # 0.27+: its batch in flight still delivers; resuming now could resample it.
                skipped.append(waiting.pop_request())
                self.deferred_waiting.add(request)
                continue
            gate = self._schedule_waiting_request(plan, request, threshold, defer)
            if gate is not None:
                return gate
        return None

    def _schedule_waiting_request(
        self, plan: StepPlan, request: Request, threshold: int, defer: bool
    ) -> str | None:
        """Admit `request`, the head of WAITING, or return the gate that holds it."""
        looked_up = request.num_computed_tokens == 0
        hit_blocks: list[KVCacheBlock] = []
        num_hit_tokens = 0
        if looked_up:
            hit_blocks, num_hit_tokens = self.kv_cache_manager.get_computed_blocks(request)
            if not self.stats_at_admission:
                # 0.20: every lookup counts, admitted or not.
                self._count_prefix_lookup(plan, request, num_hit_tokens)
        num_computed = request.num_computed_tokens + num_hit_tokens
        if defer and num_computed < request.num_tokens - 1:
            plan.wait_detail = self.cadence.throttle_detail(self.current_step)
            return PREFILL_THROTTLED
        # num_tokens, not the prompt: a resumed request recomputes its outputs too.
        num_new_tokens = request.num_tokens - num_computed
        padded = 0
        if self.pad_new_decodes and num_new_tokens == 1:
            pad = self._pad_new_decode(plan, num_computed)
            if pad is None:
                return TOKEN_BUDGET
            if pad:
                num_new_tokens = padded = pad
        if 0 < threshold < num_new_tokens:
            num_new_tokens = threshold
        if num_new_tokens > plan.token_budget:
            if not self.enable_chunked_prefill:
                plan.wait_detail = {
                    "tokens_needed": num_new_tokens,
                    "budget_left": plan.token_budget,
                }
                return NO_CHUNKING_FIT
            num_new_tokens = plan.token_budget
        gate = self._allocate_waiting(
            plan, request, num_computed, num_new_tokens, num_hit_tokens, hit_blocks
        )
        if gate is not None:
            return gate
        if padded and num_new_tokens != padded:
            # vLLM accepts this configuration and fails here, its slots already allocated.
            raise SchedulerAssertion(
                self.current_step,
                "num_new_tokens == 1 + self.num_spec_tokens",
                f"request {request.request_id}, a new decode padded to {padded} tokens, "
                f"was cut to {num_new_tokens} by long_prefill_token_threshold {threshold}",
            )
        self._admit(plan, num_new_tokens, num_computed, num_hit_tokens)
        plan.token_budget -= num_new_tokens
        if looked_up and self.stats_at_admission:
            # 0.27+: only admitted requests count.
            self._count_prefix_lookup(plan, request, num_hit_tokens)
        if num_computed < request.num_tokens - 1:
            plan.prefill_admitted = True
        if padded:
            plan.spec_token_ids[request.request_id] = [PAD_DRAFT] * self.num_spec_tokens
        return None

    def _count_prefix_lookup(self, plan: StepPlan, request: Request, num_hit: int) -> None:
        """Prefix-cache stats: a first lookup counts its tokens as queries, its hits."""
        if self.kv_cache_manager.enable_caching and not request.num_preemptions:
            plan.prefix_cache_queries += request.num_tokens
            plan.prefix_cache_hits += num_hit

    def _pad_new_decode(self, plan: StepPlan, num_computed: int) -> int | None:
        """Speculative decoding (0.25+): a new decode is padded to the uniform 1 + K
        tokens when it joins scheduled running requests (0.30+: or resumes with tokens
        computed). Returns the padded size, 0 if it runs unpadded, None if it waits
        (token_budget; the detail is recorded)."""
        if plan.prefill_scheduled or not (
            plan.scheduled_running or (num_computed > 0 and self.pad_with_room)
        ):
            return 0
        size = 1 + self.num_spec_tokens
        if self.pad_with_room:
            # 0.30+: padded only with room for the sampled token, else it runs unpadded.
            if num_computed + size + 1 > self.max_model_len:
                return 0
        elif num_computed + size > self.max_model_len:
            # 0.25 .. 0.29: one that would pass max_model_len padded waits.
            plan.wait_detail = {"padded_tokens": size, "budget_left": plan.token_budget}
            return None
        if size > plan.token_budget:
            plan.wait_detail = {"padded_tokens": size, "budget_left": plan.token_budget}
            return None
        return size

    def _allocate_waiting(
        self,
        plan: StepPlan,
        request: Request,
        num_computed: int,
        num_new_tokens: int,
        num_hit_tokens: int,
        hit_blocks: list[KVCacheBlock],
    ) -> str | None:
        """Allocate the slots of a waiting request (its whole sequence checked first
        with scheduler_reserve_full_isl), or return the KV gate that holds it."""
        kv = self.kv_cache_manager
        watermark = self.watermark_blocks if self.running else 0
        if self.scheduler_reserve_full_isl and not kv.can_fit_full_sequence(
            request, hit_blocks, watermark
        ):
            return self._kv_gate(plan, request, request.num_tokens, hit_blocks, True, watermark)
        if (
            kv.allocate_slots(request, num_new_tokens, num_hit_tokens, hit_blocks, watermark)
            is None
        ):
            num_tokens = num_computed + num_new_tokens
            return self._kv_gate(plan, request, num_tokens, hit_blocks, False, watermark)
        return None

    def _kv_gate(
        self,
        plan: StepPlan,
        request: Request,
        num_tokens: int,
        hit_blocks: list[KVCacheBlock],
        full_sequence: bool,
        watermark: int,
    ) -> str:
        """The KV gate held the head request: kv_watermark if it would have fit without
        the watermark, else kv_blocks. Records the numbers."""
        kv = self.kv_cache_manager
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

    def _admit(
        self, plan: StepPlan, num_new_tokens: int, num_computed: int, num_hit: int
    ) -> Request:
        """Move the head of WAITING to RUNNING with its slots allocated: `num_computed`
        tokens done (`num_hit` of them prefix-cache hits), `num_new_tokens` scheduled this
        step. The caller charges the token budget."""
        request = self.waiting.pop_request()
        if self.deferred_waiting:
            self.deferred_waiting.discard(request)
        self.running.append(request)
        if request.status == RequestStatus.PREEMPTED:
            plan.resumed_reqs.append(request)
        else:
            plan.new_reqs.append(request)
        req_id = request.request_id
        plan.num_scheduled_tokens[req_id] = num_new_tokens
        plan.new_blocks_of[req_id] = self.kv_cache_manager.get_block_ids(req_id)
        plan.computed_before[req_id] = num_computed
        plan.prefix_hits[req_id] = num_hit
        request.status = RequestStatus.RUNNING
        request.num_computed_tokens = num_computed
        if request.num_cached_tokens < 0:
            request.num_cached_tokens = num_computed
        return request

    # -------------------------------------------------------- the step's output
    def _num_padding_tokens(self, plan: StepPlan) -> int:  # noqa: ARG002
        """Hook: computed positions of the step that produce nothing."""
        return 0

    def _waiting_detail(self, stop_reason: str | None, plan: StepPlan) -> WaitingDetail:
        """The numbers behind the step's gate (see engine.waiting)."""
        reason = stop_reason or TOKEN_BUDGET
        detail: WaitingDetail = {"gate": reason, "policy": self.policy.value}
        detail.update(self._gate_detail(reason, plan))
        if self.waiting:
            detail["head"] = self.waiting.peek_request().request_id
        if plan.cache_aware:
            detail.update(plan.cache_aware)
        return detail

    def _gate_detail(self, reason: str, plan: StepPlan) -> WaitingDetail:
        """Hook: the numbers of one gate."""
        return gate_detail(
            reason,
            plan,
            self.max_num_scheduled_tokens,
            self.max_num_running_reqs,
            self.max_num_active_reqs,
            len(self.running),
        )

    # ----------------------------------------- preemption, progress after the plan
    def _preempt_request(self, request: Request) -> None:
        """Free the victim's blocks and send it to the front of WAITING to recompute."""
        assert request.status == RequestStatus.RUNNING
        self.tokens_lost[request.request_id] = request.num_computed_tokens
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        if self.stale_output:
            # 0.27+: what is in flight arrives as stale output (delivered, no counters).
            request.num_stale_output_tokens = request.num_in_flight_tokens
            request.num_output_placeholders = 0
        # NOTE (0.20): output placeholders stay: tokens of a batch in flight still arrive.
        request.spec_token_ids = []
        request.num_preemptions += 1
        self.waiting.prepend_request(request)

    def _update_after_schedule(self, plan: StepPlan) -> None:
        """Advance the scheduled requests' progress (the plan was built from the old one)."""
        # NOTE: progress advances when the plan is made, before the forward pass, so a
        # prefill can be scheduled again at once; rejected drafts are rolled back later.
        requests = self.requests
        async_scheduling = self.async_scheduling
        track_in_flight = self.track_in_flight
        spec = plan.spec_token_ids
        for req_id, n in plan.num_scheduled_tokens.items():
            request = requests[req_id]
            request.num_computed_tokens += n
            if track_in_flight:
                request.num_in_flight_tokens += n
            request.is_prefill_chunk = is_chunk = request.num_computed_tokens < (
                request.num_tokens + request.num_output_placeholders
            )
            if async_scheduling and not is_chunk:
                # The batch will produce one token (plus accepted drafts) per request.
                request.num_output_placeholders += 1 + len(spec.get(req_id, ()))

    # ================================================================== update
    def update_from_output(
        self, output: SchedulerOutput, runner_output: ModelRunnerOutput
    ) -> UpdateResult:
        """Append sampled tokens (verifying drafts) and apply stops."""
        result = UpdateResult([], [], {}, {}, [])
        stopped_running: set[Request] = set()
        stopped_waiting: list[Request] = []
        sampled_token_ids = runner_output.sampled_token_ids
        track_in_flight = self.track_in_flight
        for chunk in output.chunks:
            request = self.requests.get(chunk.req_id)
            stale = False
            if track_in_flight and request is not None:
                # The batch's tokens are no longer in flight.
                request.num_in_flight_tokens -= chunk.num_tokens
                if request.num_stale_output_tokens > 0:
                    # 0.27+: the batch was in flight when the request was preempted.
                    stale = True
                    request.num_stale_output_tokens -= chunk.num_tokens
            generated = sampled_token_ids.get(chunk.req_id)
            if not generated or request is None or request.is_finished():
                # Nothing sampled, or finished (aborted) while the batch was in flight.
                continue
            status_before = request.status
            if self._update_request_with_output(request, chunk, generated, stale, result):
                self._free_request(request)
                if status_before == RequestStatus.RUNNING:
                    stopped_running.add(request)
                else:
                    stopped_waiting.append(request)
                    self.deferred_waiting.discard(request)
        if stopped_running:
            self.running = [r for r in self.running if r not in stopped_running]
        if stopped_waiting:
            self.waiting.remove_requests(stopped_waiting)
        return result

    def _update_request_with_output(
        self,
        request: Request,
        chunk: ScheduledChunk,
        generated: Sequence[int],
        stale: bool,
        result: UpdateResult,
    ) -> bool:
        """Apply one request's sampled tokens. Returns whether it stopped."""
        if chunk.spec_token_ids:
            _apply_verification(
                request, len(chunk.spec_token_ids), generated, result, rollback=not stale
            )
        status_before = request.status
        num_appended, stopped = _append_output(request, generated, self.max_model_len)
        if stopped and self.stop_rolls_back and not stale:
            # 0.33: positions past the stop were never really computed.
            request.num_computed_tokens -= len(generated) - num_appended
        if self.async_scheduling and not stale:
            request.num_output_placeholders -= num_appended
            assert request.num_output_placeholders >= 0
        # Cache the blocks the output completed; not for a request preempted while
        # its batch was in flight (its blocks are gone).
        if self.cache_after_output and status_before == RequestStatus.RUNNING and not stale:
            in_flight = (
                request.num_in_flight_tokens
                if self.track_in_flight
                else request.num_output_placeholders
            )
            self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens - in_flight)
        result.sampled_req_ids.append(request.request_id)
        result.appended_tokens[request.request_id] = num_appended
        result.drafted.append(request)
        if stopped:
            result.finished.append(request)
        return stopped

    def update_draft_token_ids(
        self, req_ids: Iterable[str], draft_token_ids: Iterable[list[int]]
    ) -> None:
        """Take the drafter's proposals (vLLM's update_draft_token_ids)."""
        requests = self.requests
        for req_id, drafts in zip(req_ids, draft_token_ids, strict=True):
            request = requests.get(req_id)
            if request is None or request.is_finished():
                continue
            if request.is_prefill_chunk:
                # Drafts are ignored for a request still in a prefill chunk.
                request.spec_token_ids = []
                continue
            request.spec_token_ids = drafts

    # ================================================================ requests
    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        self.requests[request.request_id] = request
        self.waiting.add_request(request)

    def rejection_reason(self, num_prompt_tokens: int, max_tokens: int) -> str | None:
        """Why a request could never run here, or None. Checked before it is queued."""
        kv = self.kv_cache_manager
        return rejection_reason(
            num_prompt_tokens,
            max_tokens,
            self.max_model_len,
            kv.block_size,
            kv.block_pool.num_usable_blocks,
        )

    def finish_requests(self, request_ids: Iterable[str], status: RequestStatus) -> list[str]:
        """Finish requests from outside (abort). Returns the ids that were live."""
        done: list[Request] = []
        for req_id in request_ids:
            request = self.requests.get(req_id)
            if request is not None and not request.is_finished():
                done.append(request)
        running = {r for r in done if r.status == RequestStatus.RUNNING}
        if running:
            self.running = [r for r in self.running if r not in running]
        waiting = [r for r in done if r not in running]
        if waiting:
            self.waiting.remove_requests(waiting)
            self.deferred_waiting.difference_update(waiting)
        for request in done:
            request.status = status
            self._free_request(request)
        return [r.request_id for r in done]

    def _free_request(self, request: Request) -> None:
        self.kv_cache_manager.free(request)
        self.finished_req_ids.add(request.request_id)
        del self.requests[request.request_id]

    def has_unfinished_requests(self) -> bool:
        return bool(self.running) or bool(self.waiting)

    def has_requests(self) -> bool:
        """Unfinished requests, or finished ids not yet reported in a plan (vLLM)."""
        return bool(self.running) or bool(self.waiting) or bool(self.finished_req_ids)

    def output_placeholders(self) -> dict[str, int]:
        """Async scheduling: the output placeholders of each request that has some."""
        if not self.async_scheduling:
            return {}
        return {
            r.request_id: r.num_output_placeholders
            for r in self.requests.values()
            if r.num_output_placeholders
        }

    def idle_output(self, step: int) -> SchedulerOutput:
        """The plan of a step that scheduled nothing (async: schedule() was not called):
        queues and KV use as they are at the step's start."""
        return SchedulerOutput.make_empty(
            step,
            len(self.running),
            len(self.waiting),
            self.kv_cache_manager.block_pool.get_num_used_blocks(),
        )

    # ================================================================== config
    def update_config(self, config: EngineConfig) -> None:
        """Take new scheduler knobs; they apply from the next schedule()."""
        old = self.config
        check_config_change(old, config)
        limit = config.cache.kv_block_limit
        if limit != old.cache.kv_block_limit:
            check_kv_block_limit(
                self.requests.values(),
                limit or config.cache.num_usable_blocks,
                self.kv_cache_manager.block_size,
                self.max_model_len,
            )
            self.kv_cache_manager.block_pool.set_limit(limit)
        if config.scheduler.policy != self.policy:
            queue = create_request_queue(config.scheduler.policy)
            for request in list(self.waiting):
                queue.add_request(request)
            self.waiting = queue
        self.config = config
        self._apply_scheduler_config(config)


def _apply_verification(
    request: Request,
    num_draft: int,
    generated: Sequence[int],
    result: UpdateResult,
    rollback: bool = True,
) -> None:
    """Rejected drafts were counted as computed: roll them back (not for stale output:
    its counts predate the preemption's reset)."""
    num_accepted = len(generated) - 1
    num_rejected = num_draft - num_accepted
    if rollback and request.num_computed_tokens > 0:
        request.num_computed_tokens -= num_rejected
    if rollback and request.num_output_placeholders > 0:
        request.num_output_placeholders -= num_rejected
    request.num_draft_tokens += num_draft
    request.num_accepted_tokens += num_accepted
    result.accepted_tokens[request.request_id] = num_accepted


def _append_output(
    request: Request, generated: Sequence[int], max_model_len: int
) -> tuple[int, bool]:
    """Append tokens one by one; tokens past a stop are trimmed. Returns (appended,
    stopped)."""
    for num, token_id in enumerate(generated, 1):
        request.append_output_token_id(token_id)
        if check_stop(request, token_id, max_model_len):
            return num, True
    return len(generated), False
