"""The scheduler's state and everything but the step: knobs, queues, admission checks,
aborts, preemption and the waiting reasons reported with each plan."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from engine.block_pool import KVCacheBlock
from engine.config import BatchingMode, ConfigError, EngineConfig, SchedulingPolicy
from engine.kv_cache_manager import KVCacheManager, cdiv
from engine.outputs import SchedulerOutput
from engine.prefill_cadence import PrefillCadence
from engine.releases import ReleaseFeatures, release_features
from engine.request import Request, RequestStatus
from engine.request_queue import RequestQueue, create_request_queue
from engine.scheduler_plan import StepPlan
from engine.waiting import WaitingDetail, token_budget_detail

# Why a waiting request was not admitted this step (the first gate that held it).
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


class SchedulerBase:
    def __init__(self, config: EngineConfig, features: ReleaseFeatures | None = None) -> None:
        config.validate()
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
        self._tokens_lost: dict[str, int] = {}
        self.static_batch: list[str] = []
        """Static batching: the request ids of the batch admitted last."""
        self.deferred_waiting: set[Request] = set()
        """vLLM 0.31+: waiting requests a scan skipped (stale output still in flight)."""
        self.cadence = PrefillCadence(config.scheduler.prefill_schedule_interval)
        self.current_step = 0
        """The engine step being scheduled (for waiting details)."""
        self.config = config
        self._apply_scheduler_config(config)

    # ----------------------------------------------------------------- config
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
        self.static_batching = sc.batching is BatchingMode.STATIC
        # Later releases (engine.releases): booleans and numbers for the hot paths.
        f = self.features
        self.lone_request_uncapped = f.lone_request_uncapped
        self.threshold_adaptive = sc.long_prefill_token_threshold_adaptive
        self.max_num_active_reqs = sc.max_num_active_seqs or sc.max_num_seqs
        self.watermark_blocks = int(sc.watermark * config.cache.num_gpu_blocks)
        self.cadence.interval = sc.prefill_schedule_interval
        self.pad_new_decodes = f.spec_pads_new_decodes and self.num_spec_tokens > 0
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

    def update_config(self, config: EngineConfig) -> None:
        """Take new scheduler knobs; they apply from the next schedule()."""
        config.validate()
        old = self.config
        old_cache = old.cache
        if dataclasses.replace(config.cache, kv_block_limit=old_cache.kv_block_limit) != old_cache:
            raise ValueError("the KV pool (cache config) cannot change while running")
        if config.vllm_version != old.vllm_version:
            raise ValueError("vllm_version cannot change while running; start a new session")
        for name in (
            "max_model_len",
            "async_scheduling",
            "num_speculative_tokens",
            "prompt_lookup_max",
            "prompt_lookup_min",
            "batching",
        ):
            if getattr(config.scheduler, name) != getattr(old.scheduler, name):
                raise ValueError(f"{name} cannot change while running; start a new session")
        if config.cache.kv_block_limit != old_cache.kv_block_limit:
            self._check_kv_block_limit(
                config.cache.kv_block_limit or config.cache.num_usable_blocks
            )
            self.kv_cache_manager.block_pool.set_limit(config.cache.kv_block_limit)
        if config.scheduler.policy != self.policy:
            queue = create_request_queue(config.scheduler.policy)
            for request in list(self.waiting):
                queue.add_request(request)
            self.waiting = queue
        self.config = config
        self._apply_scheduler_config(config)

    def _check_kv_block_limit(self, limit: int) -> None:
        block_size = self.kv_cache_manager.block_size
        for request in self.requests.values():
            outputs = min(request.max_tokens, self.max_model_len - request.num_prompt_tokens)
            needed = cdiv(request.num_prompt_tokens + outputs - 1, block_size)
            if needed > limit:
                raise ConfigError(
                    "kv_block_limit",
                    f"request {request.request_id!r} needs {needed} blocks at its peak; "
                    f"a pool of {limit} could never finish it",
                )

    # --------------------------------------------------------------- requests
    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        self.requests[request.request_id] = request
        self.waiting.add_request(request)

    def rejection_reason(self, num_prompt_tokens: int, max_tokens: int) -> str | None:
        """Why a request could never run here, or None. Checked before it is queued."""
        if num_prompt_tokens <= 0:
            return "empty prompt"
        if num_prompt_tokens >= self.max_model_len:
            return (
                f"prompt of {num_prompt_tokens} tokens needs max_model_len > {num_prompt_tokens} "
                f"(is {self.max_model_len})"
            )
        # At its last step a request holds slots for prompt + outputs - 1 tokens.
        num_outputs = min(max_tokens, self.max_model_len - num_prompt_tokens)
        peak_tokens = num_prompt_tokens + num_outputs - 1
        needed = cdiv(peak_tokens, self.kv_cache_manager.block_size)
        usable = self.kv_cache_manager.block_pool.num_usable_blocks
        if needed > usable:
            return (
                f"needs {needed} KV blocks at its peak ({peak_tokens} tokens) but the pool "
                f"has {usable} usable blocks: it could never finish"
            )
        return None

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

    def idle_output(self, step: int) -> SchedulerOutput:
        """The plan of a step that scheduled nothing (async: schedule() was not called):
        queues and KV use as they are at the step's start."""
        return SchedulerOutput(
            step=step,
            chunks=(),
            total_num_scheduled_tokens=0,
            new_req_ids=(),
            resumed_req_ids=(),
            preempted_req_ids=(),
            preempted_tokens_lost=(),
            finished_req_ids=(),
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            kv_blocks_used=self.kv_cache_manager.block_pool.get_num_used_blocks(),
            waiting_reasons={},
        )

    # ------------------------------------------------------------- preemption
    def _preempt_until_fits(
        self, plan: StepPlan, request: Request, num_new_tokens: int, req_index: int
    ) -> tuple[list[KVCacheBlock] | None, int]:
        """The pool is short for `request`: preempt the lowest-priority running request
        (FCFS: the last one), which may be `request` itself, until its slots fit.
        Returns (new blocks or None if `request` was preempted, the updated index)."""
        kv = self.kv_cache_manager
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
            new_blocks = kv.allocate_slots(request, num_new_tokens)
            if new_blocks is not None:
                return new_blocks, req_index

    def _preempt_request(self, request: Request) -> None:
        """Free the victim's blocks and send it to the front of WAITING to recompute."""
        assert request.status == RequestStatus.RUNNING
        self._tokens_lost[request.request_id] = request.num_computed_tokens
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

    # --------------------------------------------------------- waiting reasons
    def _waiting_detail(self, stop_reason: str | None, plan: StepPlan) -> WaitingDetail:
        """The numbers behind the step's gate (see engine.waiting)."""
        reason = stop_reason or TOKEN_BUDGET
        detail: WaitingDetail = {"gate": reason, "policy": self.policy.value}
        if reason == TOKEN_BUDGET:
            spec = plan.spec_token_ids
            num_scheduled = plan.num_scheduled_tokens
            decodes = {
                r.request_id
                for r in plan.scheduled_running
                if num_scheduled[r.request_id] == 1 + len(spec.get(r.request_id, ()))
            }
            detail.update(
                token_budget_detail(
                    self.max_num_scheduled_tokens,
                    plan.token_budget,
                    plan.num_scheduled_tokens,
                    decodes,
                )
            )
            detail.update(plan.wait_detail)  # a padded decode that did not fit (0.25+)
        elif reason == MAX_NUM_SEQS:
            detail["max_num_seqs"] = self.max_num_running_reqs
            detail["num_running"] = len(self.running)
        elif reason == MAX_NUM_ACTIVE_SEQS:
            detail["max_num_active_seqs"] = self.max_num_active_reqs
            detail["max_num_seqs"] = self.max_num_running_reqs
            detail["num_running"] = len(self.running)
        elif reason == PREEMPTION_THIS_STEP:
            detail["num_preempted"] = len(plan.preempted)
        elif reason == STATIC_BATCH:
            detail["batch_size"] = len(self.static_batch)
        elif reason in (KV_BLOCKS, KV_WATERMARK, NO_CHUNKING_FIT, PREFILL_THROTTLED):
            detail.update(plan.wait_detail)
        if self.waiting:
            detail["head"] = self.waiting.peek_request().request_id
        return detail

    def _waiting_reasons(self, stop_reason: str | None) -> dict[str, str]:
        if not self.waiting:
            return {}
        if stop_reason in (KV_BLOCKS, KV_WATERMARK, NO_CHUNKING_FIT):
            # A gate of the head request alone: the rest queue behind it.
            head = self.waiting.peek_request().request_id
            return {
                r.request_id: (stop_reason if r.request_id == head else POLICY_ORDER)
                for r in self.waiting
            }
        reason = stop_reason or TOKEN_BUDGET
        return {r.request_id: reason for r in self.waiting}
