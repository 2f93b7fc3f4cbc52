"""vLLM v1's scheduler: schedule() makes a step's plan, update_from_output() applies the
runner's result; with `async_scheduling` it is vLLM's AsyncScheduler (output placeholders).

There is no prefill phase and no decode phase: every request has `num_tokens_with_spec`
(+ output placeholders under async scheduling) and `num_computed_tokens`, and each step
hands out token budget so the second catches up with the first (chunked prefill, prefix
hits, decodes, drafts and recompute are all "deficit").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engine.outputs import ModelRunnerOutput, SchedulerOutput, UpdateResult
from engine.request import Request, RequestStatus
from engine.scheduler_base import (
    KV_BLOCKS,
    KV_WATERMARK,
    MAX_NUM_ACTIVE_SEQS,
    MAX_NUM_SEQS,
    NO_CHUNKING_FIT,
    PAUSED,
    POLICY_ORDER,
    PREEMPTION_THIS_STEP,
    PREFILL_THROTTLED,
    TOKEN_BUDGET,
    SchedulerBase,
)
from engine.scheduler_plan import StepPlan
from engine.scheduler_waiting import schedule_waiting
from engine.static_batching import idle_rows, schedule_waiting_static
from engine.stop import check_stop

__all__ = [
    "KV_BLOCKS",
    "KV_WATERMARK",
    "MAX_NUM_ACTIVE_SEQS",
    "MAX_NUM_SEQS",
    "NO_CHUNKING_FIT",
    "PAUSED",
    "POLICY_ORDER",
    "PREEMPTION_THIS_STEP",
    "PREFILL_THROTTLED",
    "TOKEN_BUDGET",
    "Scheduler",
]


class Scheduler(SchedulerBase):
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
        plan = StepPlan(0 if self.paused else self.max_num_scheduled_tokens)
        threshold = self._step_threshold()
        defer = self.cadence.defer(throttle_prefills, self.running)
        self._schedule_running(plan, threshold, defer)
        # Next, the WAITING requests, unless something was preempted this step.
        if self.paused:
            stop_reason: str | None = PAUSED
        elif plan.preempted:
            stop_reason = PREEMPTION_THIS_STEP
        elif self.static_batching:
            stop_reason = schedule_waiting_static(self, plan)
        else:
            stop_reason = self._schedule_waiting_pass(plan, threshold, defer)
            if not defer:
                self.cadence.after_admission(len(self.waiting) - len(self.deferred_waiting))
        assert plan.token_budget >= 0
        assert len(self.running) <= self.max_num_running_reqs
        total = sum(plan.num_scheduled_tokens.values())
        self.cadence.after_step(total, plan.prefill_scheduled or plan.prefill_admitted)

        kv_used = self.kv_cache_manager.block_pool.get_num_used_blocks()
        preempted = plan.preempted
        waiting_reasons = self._waiting_reasons(stop_reason)
        waiting_detail = self._waiting_detail(stop_reason, plan) if waiting_reasons else {}
        # The plan above was built from the old num_computed_tokens; advance them now.
        self._update_after_schedule(plan)
        output = SchedulerOutput(
            step=step,
            chunks=plan.make_chunks(self.requests, late_tokens),
            total_num_scheduled_tokens=total,
            new_req_ids=tuple(r.request_id for r in plan.new_reqs),
            resumed_req_ids=tuple(r.request_id for r in plan.resumed_reqs),
            preempted_req_ids=tuple(r.request_id for r in preempted),
            preempted_tokens_lost=tuple(self._tokens_lost.pop(r.request_id) for r in preempted),
            finished_req_ids=tuple(self.finished_req_ids),
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            kv_blocks_used=kv_used,
            waiting_reasons=waiting_reasons,
            waiting_detail=waiting_detail,
            sampling_params={
                r.request_id: r.sampling_params for r in plan.new_reqs + plan.resumed_reqs
            },
            num_spec_tokens=sum(len(s) for s in plan.spec_token_ids.values()),
            num_padding_tokens=(
                sum(plan.padding.values()) + idle_rows(self) if self.static_batching else 0
            ),
            prefix_cache_queries=plan.prefix_cache_queries,
            prefix_cache_hits=plan.prefix_cache_hits,
        )
        self.finished_req_ids = set()
        return output

    def _step_threshold(self) -> int:
        """This step's long_prefill_token_threshold (0 = no cap)."""
        threshold = self.long_prefill_token_threshold
        if not threshold or not self.lone_request_uncapped:
            return threshold
        # 0.31+: a request alone has nobody to starve.
        num_eligible = len(self.running) + len(self.waiting)
        if num_eligible <= 1:
            return 0
        if self.threshold_adaptive:
            return max(threshold, self.max_num_scheduled_tokens // num_eligible)
        return threshold

    def _schedule_running(self, plan: StepPlan, threshold: int, defer: bool) -> None:
        """RUNNING requests first, in running order."""
        kv = self.kv_cache_manager
        max_model_len = self.max_model_len
        num_scheduled_tokens = plan.num_scheduled_tokens
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
                new_blocks, req_index = self._preempt_until_fits(
                    plan, request, num_new_tokens, req_index
                )
                if new_blocks is None:
                    if self.priority_continues:
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

    def _schedule_waiting_pass(self, plan: StepPlan, threshold: int, defer: bool) -> str | None:
        """The waiting scan; requests it skipped go back to the front afterwards."""
        skipped: list[Request] = []
        stop = schedule_waiting(self, plan, threshold, defer, skipped)
        for request in reversed(skipped):  # the first one skipped ends up in front
            self.waiting.prepend_request(request)
        return stop

    def _update_after_schedule(self, plan: StepPlan) -> None:
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
                len(request.token_ids) + request.num_output_placeholders
            )
            if async_scheduling and not is_chunk:
                # The batch will produce one token (plus accepted drafts) per request.
                request.num_output_placeholders += 1 + len(spec.get(req_id, ()))

    # ------------------------------------------------------------ update
    def update_from_output(
        self, output: SchedulerOutput, runner_output: ModelRunnerOutput
    ) -> UpdateResult:
        """Append sampled tokens (verifying drafts) and apply stops."""
        result = UpdateResult([], [], {}, {}, [])
        stopped_running: set[Request] = set()
        stopped_waiting: list[Request] = []
        requests = self.requests
        sampled_token_ids = runner_output.sampled_token_ids
        async_scheduling = self.async_scheduling
        track_in_flight = self.track_in_flight
        cache_after_output = self.cache_after_output
        for chunk in output.chunks:
            req_id = chunk.req_id
            request = requests.get(req_id)
            stale = False
            if track_in_flight and request is not None:
                request.num_in_flight_tokens -= chunk.num_tokens
                if request.num_stale_output_tokens > 0:
                    # 0.27+: the batch was in flight when the request was preempted.
                    stale = True
                    request.num_stale_output_tokens -= chunk.num_tokens
            generated = sampled_token_ids.get(req_id)
            if not generated:
                continue
            if request is None or request.is_finished():
                # Finished (aborted) while the batch was in flight.
                continue
            if chunk.spec_token_ids:
                self._apply_verification(
                    request, len(chunk.spec_token_ids), generated, result, rollback=not stale
                )
            status_before = request.status
            num_appended, stopped = self._append_output(request, generated)
            if stopped and self.stop_rolls_back and not stale:
                # 0.33: positions past the stop were never really computed.
                request.num_computed_tokens -= len(generated) - num_appended
            if async_scheduling and not stale:
                request.num_output_placeholders -= num_appended
                assert request.num_output_placeholders >= 0
            # Cache the blocks the output completed; not for a request preempted while
            # its batch was in flight (its blocks are gone).
            if cache_after_output and status_before == RequestStatus.RUNNING and not stale:
                in_flight = (
                    request.num_in_flight_tokens
                    if track_in_flight
                    else request.num_output_placeholders
                )
                self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens - in_flight)
            result.sampled_req_ids.append(req_id)
            result.appended_tokens[req_id] = num_appended
            result.drafted.append(request)
            if stopped:
                result.finished.append(request)
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

    @staticmethod
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

    def _append_output(self, request: Request, generated: Sequence[int]) -> tuple[int, bool]:
        """Append tokens one by one; tokens past a stop are trimmed. Returns (appended,
        stopped)."""
        max_model_len = self.max_model_len
        for num, token_id in enumerate(generated, 1):
            request.append_output_token_id(token_id)
            if check_stop(request, token_id, max_model_len):
                return num, True
        return len(generated), False

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
