"""vLLM v1's scheduler: schedule() makes a step's plan, update_from_output() applies the
runner's result; with `async_scheduling` it is vLLM's AsyncScheduler (output placeholders).

There is no prefill phase and no decode phase: every request has `num_tokens_with_spec`
(+ output placeholders under async scheduling) and `num_computed_tokens`, and each step
hands out token budget so the second catches up with the first (chunked prefill, prefix
hits, decodes, drafts and recompute are all "deficit").

The step's parts live beside this file: the RUNNING pass and preemption
(engine.scheduler_running), the WAITING scan (engine.scheduler_waiting), applying the
runner's output and drafts (engine.scheduler_update), the reason codes
(engine.waiting_reasons), and the checks of new requests and knob changes against the
config (engine.scheduler_checks).
A variant overrides the hooks marked "hook" (engine.static_batching does).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import ClassVar

from engine.config import BatchingMode, EngineConfig, SchedulingPolicy
from engine.kv_cache_manager import KVCacheManager
from engine.outputs import ModelRunnerOutput, SchedulerOutput, UpdateResult
from engine.prefill_cadence import PrefillCadence
from engine.releases import ReleaseFeatures, release_features
from engine.request import Request, RequestStatus
from engine.request_queue import RequestQueue, create_request_queue
from engine.scheduler_checks import check_config_change, rejection_reason
from engine.scheduler_plan import StepPlan
from engine.scheduler_running import schedule_running
from engine.scheduler_update import apply_output, update_after_schedule, update_draft_token_ids
from engine.scheduler_waiting import schedule_waiting
from engine.waiting import WaitingDetail
from engine.waiting_reasons import (
    PAUSED,
    PREEMPTION_THIS_STEP,
    TOKEN_BUDGET,
    gate_detail,
    waiting_reasons,
)


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

    def update_config(self, config: EngineConfig) -> None:
        """Take new scheduler knobs; they apply from the next schedule()."""
        check_config_change(self, config)
        if config.cache.kv_block_limit != self.config.cache.kv_block_limit:
            self.kv_cache_manager.block_pool.set_limit(config.cache.kv_block_limit)
        if config.scheduler.policy != self.policy:
            queue = create_request_queue(config.scheduler.policy)
            for request in list(self.waiting):
                queue.add_request(request)
            self.waiting = queue
        self.config = config
        self._apply_scheduler_config(config)

    # --------------------------------------------------------------- requests
    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        self.requests[request.request_id] = request
        self.waiting.add_request(request)

    def rejection_reason(self, num_prompt_tokens: int, max_tokens: int) -> str | None:
        """Why a request could never run here, or None. Checked before it is queued."""
        return rejection_reason(self, num_prompt_tokens, max_tokens)

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
            self.free_request(request)
        return [r.request_id for r in done]

    def free_request(self, request: Request) -> None:
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
        return SchedulerOutput.make_empty(
            step,
            len(self.running),
            len(self.waiting),
            self.kv_cache_manager.block_pool.get_num_used_blocks(),
        )

    # --------------------------------------------------------------- schedule
    def schedule(
        self,
        step: int = 0,
        late_tokens: dict[str, list[int]] | None = None,
        throttle_prefills: bool = False,
    ) -> SchedulerOutput:
        """Plan one step. `late_tokens` (async scheduling): tokens the batches in flight
        sampled, per request, which the chunks' input ids need past the known tokens.
        `throttle_prefills` (vLLM 0.24+): a data-parallel coordinator's off-cadence step."""
        if throttle_prefills and not self.features.throttle_prefills:
            raise ValueError(f"vLLM {self.config.vllm_version} has no throttle_prefills")
        self.current_step = step
        num_running_before = len(self.running)
        plan = StepPlan(0 if self.paused else self.max_num_scheduled_tokens)
        threshold = self._step_threshold()
        defer = self.cadence.defer(throttle_prefills, self.running)
        schedule_running(self, plan, threshold, defer)
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
        reasons = waiting_reasons(self.waiting, stop_reason, plan.passed_over)
        waiting_detail = self._waiting_detail(stop_reason, plan) if reasons else {}
        # The plan above was built from the old num_computed_tokens; advance them now.
        update_after_schedule(self, plan)
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
        stop = schedule_waiting(self, plan, threshold, defer, skipped)
        for request in reversed(skipped):  # the first one skipped ends up in front
            self.waiting.prepend_request(request)
        if not defer:
            self.cadence.after_admission(len(self.waiting) - len(self.deferred_waiting))
        return stop

    def _num_padding_tokens(self, plan: StepPlan) -> int:  # noqa: ARG002
        """Hook: computed positions of the step that produce nothing."""
        return 0

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

    # --------------------------------------------------------- waiting detail
    def _waiting_detail(self, stop_reason: str | None, plan: StepPlan) -> WaitingDetail:
        """The numbers behind the step's gate (see engine.waiting)."""
        reason = stop_reason or TOKEN_BUDGET
        detail: WaitingDetail = {"gate": reason, "policy": self.policy.value}
        detail.update(self._gate_detail(reason, plan))
        if self.waiting:
            detail["head"] = self.waiting.peek_request().request_id
        if plan.cache_aware:
            detail.update(plan.cache_aware)  # type: ignore[typeddict-item]
        return detail

    def _gate_detail(self, reason: str, plan: StepPlan) -> WaitingDetail:
        """Hook: the numbers of one gate."""
        return gate_detail(self, reason, plan)

    # ------------------------------------------------------------------ update
    def update_from_output(
        self, output: SchedulerOutput, runner_output: ModelRunnerOutput
    ) -> UpdateResult:
        """Append sampled tokens (verifying drafts) and apply stops."""
        return apply_output(self, output, runner_output)

    def update_draft_token_ids(
        self, req_ids: Iterable[str], draft_token_ids: Iterable[list[int]]
    ) -> None:
        """Take the drafter's proposals (vLLM's update_draft_token_ids)."""
        update_draft_token_ids(self, req_ids, draft_token_ids)
