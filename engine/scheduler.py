"""vLLM v1's synchronous scheduler: schedule() makes a step's plan, update_from_output()
applies the runner's result.

There is no prefill phase and no decode phase: every request has `num_tokens` and
`num_computed_tokens`, and each step hands out token budget so the second catches up
with the first (chunked prefill, prefix hits, decodes and recompute are all "deficit").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from engine.config import ConfigError, EngineConfig, SchedulingPolicy
from engine.kv_cache_manager import KVCacheManager
from engine.outputs import ModelRunnerOutput, ScheduledChunk, SchedulerOutput
from engine.request import Request, RequestStatus
from engine.request_queue import RequestQueue, create_request_queue
from engine.stop import check_stop

# Why a waiting request was not admitted this step (the first gate that held it).
TOKEN_BUDGET = "token_budget"
MAX_NUM_SEQS = "max_num_seqs"
KV_BLOCKS = "kv_blocks"
POLICY_ORDER = "policy_order"
PREEMPTION_THIS_STEP = "preemption_this_step"
NO_CHUNKING_FIT = "no_chunking_fit"
PAUSED = "paused"


class Scheduler:
    def __init__(self, config: EngineConfig) -> None:
        config.validate()
        self.kv_cache_manager = KVCacheManager(
            num_gpu_blocks=config.cache.num_gpu_blocks,
            block_size=config.cache.block_size,
            max_model_len=config.scheduler.max_model_len,
            enable_caching=config.cache.enable_prefix_caching,
        )
        self.requests: dict[str, Request] = {}
        self.running: list[Request] = []
        self.waiting: RequestQueue = create_request_queue(config.scheduler.policy)
        # Finished since the last schedule() (aborts, and stops applied in update).
        self.finished_req_ids: set[str] = set()
        self.paused = False
        self._tokens_lost: dict[str, int] = {}
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

    def update_config(self, config: EngineConfig) -> None:
        """Take new scheduler knobs; they apply from the next schedule()."""
        config.validate()
        old_cache = self.config.cache
        if dataclasses.replace(config.cache, kv_block_limit=old_cache.kv_block_limit) != old_cache:
            raise ValueError("the KV pool (cache config) cannot change while running")
        if config.cache.kv_block_limit != old_cache.kv_block_limit:
            self._check_kv_block_limit(
                config.cache.kv_block_limit or config.cache.num_usable_blocks
            )
            self.kv_cache_manager.block_pool.set_limit(config.cache.kv_block_limit)
        if config.scheduler.max_model_len != self.config.scheduler.max_model_len:
            raise ValueError("max_model_len cannot change while running")
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
            needed = -(-(request.num_prompt_tokens + outputs - 1) // block_size)
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
        block_size = self.kv_cache_manager.block_size
        needed = -(-peak_tokens // block_size)
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

    # --------------------------------------------------------------- schedule
    def schedule(self, step: int = 0) -> SchedulerOutput:
        kv = self.kv_cache_manager
        num_scheduled_tokens: dict[str, int] = {}
        new_blocks_of: dict[str, list[int]] = {}
        computed_before: dict[str, int] = {}
        prefix_hits: dict[str, int] = {}
        new_reqs: list[Request] = []
        resumed_reqs: list[Request] = []
        scheduled_running: list[Request] = []
        preempted: list[Request] = []
        token_budget = 0 if self.paused else self.max_num_scheduled_tokens
        threshold = self.long_prefill_token_threshold
        max_model_len = self.max_model_len

        # First, the RUNNING requests, in running order.
        req_index = 0
        while req_index < len(self.running) and token_budget > 0:
            request = self.running[req_index]
            num_computed = request.num_computed_tokens
            num_new_tokens = len(request.token_ids) - num_computed
            if 0 < threshold < num_new_tokens:
                num_new_tokens = threshold
            if num_new_tokens > token_budget:
                num_new_tokens = token_budget
            # The input position never passes max_model_len.
            if num_new_tokens > max_model_len - 1 - num_computed:
                num_new_tokens = max_model_len - 1 - num_computed
            if num_new_tokens <= 0:
                req_index += 1
                continue

            while True:
                new_blocks = kv.allocate_slots(request, num_new_tokens)
                if new_blocks is not None:
                    break
                # NOTE: the pool is short: preempt the lowest-priority running request
                # (FCFS: the last one). It may be this very request.
                if self.policy is SchedulingPolicy.PRIORITY:
                    victim = max(self.running, key=lambda r: (r.priority, r.arrival_time))
                    self.running.remove(victim)
                    if victim in scheduled_running:
                        # Roll back what was planned for the victim this step.
                        scheduled_running.remove(victim)
                        token_budget += num_scheduled_tokens.pop(victim.request_id)
                        new_blocks_of.pop(victim.request_id, None)
                        computed_before.pop(victim.request_id)
                        req_index -= 1
                else:
                    victim = self.running.pop()
                self._preempt_request(victim)
                preempted.append(victim)
                if victim is request:
                    break

            if new_blocks is None:
                break
            scheduled_running.append(request)
            req_id = request.request_id
            num_scheduled_tokens[req_id] = num_new_tokens
            if new_blocks:
                new_blocks_of[req_id] = [b.block_id for b in new_blocks]
            computed_before[req_id] = num_computed
            token_budget -= num_new_tokens
            req_index += 1

        # Next, the WAITING requests, unless something was preempted this step.
        stop_reason: str | None = None
        if self.paused:
            stop_reason = PAUSED
        elif preempted:
            stop_reason = PREEMPTION_THIS_STEP
        else:
            waiting = self.waiting
            while waiting:
                if token_budget <= 0:
                    stop_reason = TOKEN_BUDGET
                    break
                if len(self.running) == self.max_num_running_reqs:
                    stop_reason = MAX_NUM_SEQS
                    break
                request = waiting.peek_request()
                if request.num_computed_tokens == 0:
                    hit_blocks, num_hit_tokens = kv.get_computed_blocks(request)
                else:
                    hit_blocks, num_hit_tokens = [], 0
                num_computed = request.num_computed_tokens + num_hit_tokens
                # num_tokens, not the prompt: a resumed request recomputes its outputs too.
                num_new_tokens = request.num_tokens - num_computed
                if 0 < threshold < num_new_tokens:
                    num_new_tokens = threshold
                if not self.enable_chunked_prefill and num_new_tokens > token_budget:
                    stop_reason = NO_CHUNKING_FIT
                    break
                num_new_tokens = min(num_new_tokens, token_budget)
                if self.scheduler_reserve_full_isl and not kv.can_fit_full_sequence(
                    request, hit_blocks
                ):
                    stop_reason = KV_BLOCKS
                    break
                new_blocks = kv.allocate_slots(request, num_new_tokens, num_hit_tokens, hit_blocks)
                if new_blocks is None:
                    stop_reason = KV_BLOCKS
                    break

                waiting.pop_request()
                self.running.append(request)
                (resumed_reqs if request.status == RequestStatus.PREEMPTED else new_reqs).append(
                    request
                )
                req_id = request.request_id
                num_scheduled_tokens[req_id] = num_new_tokens
                new_blocks_of[req_id] = kv.get_block_ids(req_id)
                computed_before[req_id] = num_computed
                prefix_hits[req_id] = num_hit_tokens
                token_budget -= num_new_tokens
                request.status = RequestStatus.RUNNING
                request.num_computed_tokens = num_computed
                if request.num_cached_tokens < 0:
                    request.num_cached_tokens = num_computed

        assert token_budget >= 0
        assert len(self.running) <= self.max_num_running_reqs

        chunks = self._make_chunks(
            num_scheduled_tokens, computed_before, new_blocks_of, prefix_hits
        )
        entered = new_reqs + resumed_reqs
        output = SchedulerOutput(
            step=step,
            chunks=chunks,
            total_num_scheduled_tokens=sum(num_scheduled_tokens.values()),
            new_req_ids=tuple(r.request_id for r in new_reqs),
            resumed_req_ids=tuple(r.request_id for r in resumed_reqs),
            preempted_req_ids=tuple(r.request_id for r in preempted),
            preempted_tokens_lost=tuple(self._tokens_lost.pop(r.request_id) for r in preempted),
            finished_req_ids=tuple(self.finished_req_ids),
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            kv_blocks_used=kv.block_pool.get_num_used_blocks(),
            waiting_reasons=self._waiting_reasons(stop_reason),
            sampling_params={r.request_id: r.sampling_params for r in entered},
        )
        self._update_after_schedule(num_scheduled_tokens)
        self.finished_req_ids = set()
        return output

    def _make_chunks(
        self,
        num_scheduled_tokens: dict[str, int],
        computed_before: dict[str, int],
        new_blocks_of: dict[str, list[int]],
        prefix_hits: dict[str, int],
    ) -> tuple[ScheduledChunk, ...]:
        requests = self.requests
        no_blocks: tuple[int, ...] = ()
        chunks = []
        for req_id, n in num_scheduled_tokens.items():
            request = requests[req_id]
            start = computed_before[req_id]
            end = start + n
            token_ids = request.token_ids
            num_tokens = len(token_ids)
            blocks = new_blocks_of.get(req_id)
            chunks.append(
                ScheduledChunk(
                    req_id,
                    n,
                    start,
                    start + 1 < num_tokens or num_tokens == request.num_prompt_tokens,
                    end == num_tokens,
                    prefix_hits.get(req_id, 0),
                    req_id in prefix_hits,
                    tuple(blocks) if blocks else no_blocks,
                    tuple(token_ids[start:end]),
                )
            )
        return tuple(chunks)

    def _waiting_reasons(self, stop_reason: str | None) -> dict[str, str]:
        if not self.waiting:
            return {}
        if stop_reason in (KV_BLOCKS, NO_CHUNKING_FIT):
            # A gate of the head request alone: the rest queue behind it.
            head = self.waiting.peek_request().request_id
            return {
                r.request_id: (stop_reason if r.request_id == head else POLICY_ORDER)
                for r in self.waiting
            }
        reason = stop_reason or TOKEN_BUDGET
        return {r.request_id: reason for r in self.waiting}

    def _preempt_request(self, request: Request) -> None:
        """Free the victim's blocks and send it to the front of WAITING to recompute."""
        assert request.status == RequestStatus.RUNNING
        self._tokens_lost[request.request_id] = request.num_computed_tokens
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.waiting.prepend_request(request)

    def _update_after_schedule(self, num_scheduled_tokens: dict[str, int]) -> None:
        # NOTE: progress advances when the plan is made, before the forward pass;
        # the plan above was built from the old values.
        requests = self.requests
        for req_id, n in num_scheduled_tokens.items():
            requests[req_id].num_computed_tokens += n

    # ------------------------------------------------------------ update
    def update_from_output(
        self, output: SchedulerOutput, runner_output: ModelRunnerOutput
    ) -> tuple[list[str], list[Request]]:
        """Append sampled tokens and apply stops. Returns (sampled ids, finished requests)."""
        sampled_ids: list[str] = []
        finished: list[Request] = []
        stopped: set[Request] = set()
        requests = self.requests
        max_model_len = self.max_model_len
        sampled_token_ids = runner_output.sampled_token_ids
        stop_check = check_stop
        for chunk in output.chunks:
            if not chunk.sample:
                continue
            request = requests.get(chunk.req_id)
            if request is None or request.is_finished():
                continue
            new_token_ids = sampled_token_ids.get(chunk.req_id)
            if not new_token_ids:
                continue
            sampled_ids.append(chunk.req_id)
            for token_id in new_token_ids:
                request.append_output_token_id(token_id)
                if stop_check(request, token_id, max_model_len):
                    stopped.add(request)
                    finished.append(request)
                    self._free_request(request)
                    break
        if stopped:
            self.running = [r for r in self.running if r not in stopped]
        return sampled_ids, finished
