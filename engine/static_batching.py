"""Static batching, the baseline continuous batching replaced (the article's section 1).

A batch is admitted only when every request of the previous one has left RUNNING. Its
prompts are prefilled whole in one step, padded to the batch's longest (the padding is
computed work that produces nothing), and a member that finishes early keeps its row:
each later step of the batch computes one wasted token for it until the longest member
is done. The budget, seq slots and KV blocks gate admission as in continuous batching,
with the padded prompt tokens counted against the budget.

`StaticBatchingScheduler` is the Scheduler with three methods overridden: the waiting
scan, the padding count and the detail of its own gate (`static_batch`).
"""

from __future__ import annotations

from typing import ClassVar

from engine.config import BatchingMode, EngineConfig
from engine.releases import ReleaseFeatures
from engine.scheduler import Scheduler
from engine.step_plan import StepPlan
from engine.waiting_reasons import KV_BLOCKS, MAX_NUM_SEQS, STATIC_BATCH, TOKEN_BUDGET
from protocol.wire import WaitingDetail


class StaticBatchingScheduler(Scheduler):
    batching: ClassVar[BatchingMode] = BatchingMode.STATIC

    def __init__(self, config: EngineConfig, features: ReleaseFeatures | None = None) -> None:
        super().__init__(config, features)
        self.static_batch: list[str] = []
        """The request ids of the batch admitted last."""

    def _schedule_waiting(self, plan: StepPlan, threshold: int, defer: bool) -> str | None:  # noqa: ARG002
        """Admit the next static batch if the previous one is done. Returns the gate."""
        if self.running:
            # Only members of the live batch run in static mode.
            return STATIC_BATCH if self.waiting else None
        batch = self.static_batch
        batch.clear()
        kv = self.kv_cache_manager
        waiting = self.waiting
        longest = 0
        admitted: list[tuple[str, int]] = []
        stop: str | None = None
        while waiting:
            if len(self.running) >= self.max_num_running_reqs:
                stop = MAX_NUM_SEQS
                break
            request = waiting.peek_request()
            hit_blocks, num_hit = kv.get_computed_blocks(request)
            if request.num_computed_tokens:
                hit_blocks, num_hit = [], 0
            num_computed = request.num_computed_tokens + num_hit
            num_new = request.num_tokens - num_computed
            padded = max(longest, num_new)
            if padded * (len(admitted) + 1) > self.max_num_scheduled_tokens:
                stop = TOKEN_BUDGET
                break
            if not kv.can_fit_full_sequence(request, hit_blocks):
                stop = KV_BLOCKS
                break
            if kv.allocate_slots(request, num_new, num_hit, hit_blocks) is None:
                stop = KV_BLOCKS
                break
            self._admit(plan, num_new, num_computed, num_hit)
            longest = padded
            admitted.append((request.request_id, num_new))
            batch.append(request.request_id)
        plan.padding = {req_id: longest - n for req_id, n in admitted if longest > n}
        plan.token_budget = self.max_num_scheduled_tokens - longest * len(admitted)
        return stop

    def _num_padding_tokens(self, plan: StepPlan) -> int:
        """Prompt padding, plus the rows of members that already finished (each computes
        one wasted token per step until the batch is done)."""
        idle_rows = 0
        if self.static_batch and self.running:
            requests = self.requests
            idle_rows = sum(1 for req_id in self.static_batch if req_id not in requests)
        return sum(plan.padding.values()) + idle_rows

    def _gate_detail(self, reason: str, plan: StepPlan) -> WaitingDetail:
        if reason == STATIC_BATCH:
            return {"batch_size": len(self.static_batch)}
        return super()._gate_detail(reason, plan)
