"""What each scheduler hook of ObserverMixin (scheduler.py) takes from vLLM, on its engine
thread: references and cheap ints (the SchedulerOutput, the returned EngineCoreOutputs, a
new request's prompt token ids, copies of the waiting queues, free KV blocks, timestamps),
one record per call for the sender's intake (`_bs_offer`: never blocks; steps.py: Arrival,
ScheduleCall, Updated). The sender thread builds the frames from them (frames.py).

These run inside the hooks' guard: an exception here stops observing, never vLLM. Where
a vLLM attribute read here is missing or changed, only the observation that needs it is
skipped, named and counted (compat.Degraded), and the rest goes on.
"""

from __future__ import annotations

import time
from typing import Any

from batchscope_vllm import compat
from batchscope_vllm.steps import Arrival, Hooked, ScheduleCall, Updated
from batchscope_vllm.waiting import Capture

_perf = time.perf_counter


class StepObservations:
    """The observations (`_bs_on_*`, `_bs_before_*`) of ObserverMixin's hooks."""

    _bs_put: Any = None
    """The sender's offer() while observing; None: every hook is pass-through."""
    _bs_step: int
    _bs_preempted: list[tuple[str, int, str]]
    _bs_in_schedule: bool
    _bs_lay: compat.Layout
    _bs_total_blocks: int = 0
    """vLLM's usable KV blocks (its null block aside)."""

    def _bs_offer(self, item: Hooked) -> None:
        put = self._bs_put  # (None once the sender thread stopped observing)
        if put is not None:
            put(item)  # never blocks: a full intake counts a drop

    def _bs_on_add(self, request: Any) -> None:
        sched: Any = self
        if request.request_id not in sched.requests:  # (not a streaming-input update)
            try:
                prompt = request.prompt_token_ids  # a reference: hashed on the sender thread
            except compat.DEGRADES_ON:
                self._bs_lay.degraded.note("prompt_block_hashes")
                prompt = None
            item = Arrival(
                request.request_id,
                request.num_prompt_tokens,
                request.max_tokens,
                request.priority,
                _perf(),
                self._bs_step,
                prompt,
            )
            self._bs_offer(item)

    def _bs_on_preempt(self, request: Any) -> None:
        reason = "kv_blocks" if self._bs_in_schedule else "reset_prefix_cache"
        try:
            lost = int(request.num_computed_tokens)
        except compat.DEGRADES_ON:
            self._bs_lay.degraded.note("tokens_lost")
            lost = 0
        self._bs_preempted.append((request.request_id, lost, reason))

    def _bs_before_schedule(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        sched: Any = self
        throttled = bool(args[0] if args else kwargs.get("throttle_prefills", False))
        cadence = (1, 0)
        if throttled or self._bs_lay.cadence:
            # vLLM holds prefills this step (DP balancing, or its local cadence) unless
            # the last release could not drain the queue (prefill_capacity_bound).
            if self._bs_lay.cadence:
                interval = sched.local_prefill_interval
                executed, last = sched.num_executed_steps, sched.last_prefill_step
                if (executed + 1) - last < interval:
                    cadence = (interval, max(last + interval - 1 - executed, 0))
                    throttled = True
                else:
                    cadence = (interval, 0)
            throttled = throttled and not getattr(sched, "prefill_capacity_bound", False)
        return (_perf(), throttled, cadence)

    def _bs_on_schedule(self, out: Any, before: tuple[Any, ...]) -> None:
        sched: Any = self
        t1 = _perf()
        lay = self._bs_lay
        preempted, self._bs_preempted = self._bs_preempted, []
        step = self._bs_step
        self._bs_step = step + 1
        try:
            cap, num_waiting = self._bs_capture(before, step)
        except compat.DEGRADES_ON:
            lay.degraded.note("waiting_reasons")
            cap, num_waiting = None, _num_waiting(sched, lay)
        self._bs_offer(
            ScheduleCall(
                out,
                step,
                before[0],
                t1,
                len(sched.running),
                num_waiting,
                self._bs_free_blocks(),
                preempted,
                cap,
            )
        )

    def _bs_capture(self, before: tuple[Any, ...], step: int) -> tuple[Capture, int]:
        """The waiting queues as schedule() left them (for the waiting reasons)."""
        sched: Any = self
        lay = self._bs_lay
        first_q = getattr(sched, lay.first_attr) if lay.first_attr else ()
        first, waiting = lay.snap_first(first_q), lay.snap_waiting(sched.waiting)
        num_waiting = len(first_q) + len(sched.waiting)
        heads = {id(r): (r.status, r.num_tokens, r.num_computed_tokens) for r in first[:3]}
        heads.update({id(r): (r.status, r.num_tokens, r.num_computed_tokens) for r in waiting[:3]})
        loras = None
        if lay.lora_max:
            loras = frozenset(
                r.lora_request.lora_int_id for r in sched.running if r.lora_request is not None
            )
        cap = Capture(
            first,
            waiting,
            num_waiting,
            int(getattr(sched, "_pause_state", 0)),
            int(getattr(sched, "num_waiting_for_streaming_input", 0) or 0),
            loras,
            before[1],
            before[2],
            step,
            heads,
        )
        return cap, num_waiting

    def _bs_free_blocks(self) -> int:
        """Free KV blocks now; where vLLM's block pool cannot tell, the whole pool (kv_used
        reads 0) and `kv_usage` is counted as degraded."""
        sched: Any = self
        try:
            return int(sched.kv_cache_manager.block_pool.get_num_free_blocks())
        except compat.DEGRADES_ON:
            self._bs_lay.degraded.note("kv_usage")
            return self._bs_total_blocks

    def _bs_before_update(self, so: Any, mro: Any) -> tuple[float, dict[str, int] | None]:
        return (_perf(), compat.generated_counts(so, mro, self._bs_lay.degraded))

    def _bs_on_update(self, so: Any, outputs: Any, before: tuple[Any, ...]) -> None:
        sched: Any = self
        lay = self._bs_lay
        first = len(getattr(sched, lay.first_attr, ())) if lay.first_attr else 0
        self._bs_offer(
            Updated(
                so,
                outputs,
                before[1],
                before[0],
                _perf(),
                len(sched.running),
                len(sched.waiting) + first,
                self._bs_free_blocks(),
            )
        )


def _num_waiting(sched: Any, lay: compat.Layout) -> int:
    first = getattr(sched, lay.first_attr, ()) if lay.first_attr else ()
    return len(first) + len(sched.waiting)
