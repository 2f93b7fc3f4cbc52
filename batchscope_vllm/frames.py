"""Build protocol v1 frames (docs/protocol.md) from the tuples the scheduler hooks queue.

Runs on the sender thread only. It reads vLLM objects the engine no longer changes: a
SchedulerOutput once schedule() returned it, the EngineCoreOutputs and ModelRunnerOutput
update_from_output() got or returned, a new request's prompt token ids (a streaming-input
session only appends to them later: the first `num_prompt_tokens` are hashed into the
arrival's `prompt_block_hashes`, protocol.blocks). Per request it keeps the little it
needs to tell prefill from decode and to fill the lifecycle marks (TTFT, ITL, finished
details: marks.py); a request is forgotten when it finishes. The hooks are grouped into engine
steps by steps.StepAssembler, in the loop vLLM runs (sync, or async scheduling's batch
queue): each frame is one step, with the batch it scheduled and the output it applied
(`updated_step`), like our own engine's.

The payloads are laid out by protocol.frames, as our own engine's are (that module
and protocol.envelope use the standard library only); the `scheduled` rows come
as JSON text from rows.py, the waiting reasons from waiting.py (computed here, from what
the schedule hook captured).
"""

from __future__ import annotations

import json
import time
from typing import Any

from batchscope_vllm.compat import DEGRADES_ON
from batchscope_vllm.marks import Frame, RequestMarks, no_outputs
from batchscope_vllm.rows import Req, Rows, encode_data, read_batch
from batchscope_vllm.steps import Arrival, Hooked, ScheduleCall, Scheduled, Step, StepAssembler
from batchscope_vllm.waiting import Capture, Limits, StepFacts, reasons
from protocol.blocks import PROMPT_BLOCK_TOKENS, prompt_block_hashes
from protocol.codes import FrameType, RequestMark
from protocol.frames import iteration_payload, request_payload
from protocol.wire import RequestDetail

__all__ = ["Frame", "FrameBuilder", "encode_data"]


class FrameBuilder:
    def __init__(
        self,
        max_tokens: int,
        max_seqs: int,
        total_blocks: int,
        async_scheduling: bool = False,
        limits: Limits | None = None,
    ) -> None:
        self.t0 = time.perf_counter()
        self.max_tokens = max_tokens
        self.max_seqs = max_seqs
        self.total_blocks = total_blocks
        self.async_scheduling = async_scheduling
        self.limits = limits
        """The scheduler's knobs for the waiting reasons (None: reasons are not computed)."""
        self.marks = RequestMarks()
        self.steps = StepAssembler()
        self.queues = (0, 0, total_blocks)
        """(running, waiting, free blocks) after the last hook: a step that did not
        schedule starts from these."""

    def build(self, item: Hooked) -> list[Frame]:
        """The frames a hook's record completes (steps.py: Arrival, ScheduleCall, Updated)."""
        if isinstance(item, Arrival):
            return self._arrival(item)
        if isinstance(item, ScheduleCall):
            batch = read_batch(item.so, self.marks.reqs, self.steps.in_flight)
            rec = Scheduled(
                item.so, item.t_start, item.t_end, item.running, item.waiting, item.free,
                item.preempted, batch, item.waits,
            )  # fmt: skip
            done = self.steps.on_schedule(rec, self.async_scheduling)
        else:
            done = self.steps.on_update(item)
        frames: list[Frame] = []
        for step in done:
            frames += self._frames(step)
        return frames

    def flush(self) -> list[Frame]:
        """Async scheduling: emit a step that only scheduled once the loop went quiet."""
        if not self.async_scheduling:
            return []
        frames: list[Frame] = []
        for step in self.steps.flush():
            frames += self._frames(step)
        return frames

    def stop(self, t: float) -> list[Frame]:
        """The node stops (at `t`, a perf_counter time): the step still open (it only
        scheduled; its output is never applied), then an `aborted` mark for every request
        still held, running or waiting, as vLLM's engine core aborts them at a stop
        (protocol.lifecycle.stop_marks). The sender's last frames before its closing one."""
        frames: list[Frame] = []
        for step in self.steps.flush():
            frames += self._frames(step)
        return frames + self.marks.stop(self.steps.next_index, max(t - self.t0, 0.0))

    def _arrival(self, item: Arrival) -> list[Frame]:
        req_id, num_prompt, prompt, t = item.req_id, item.num_prompt_tokens, item.prompt, item.t
        max_tokens, priority = item.max_tokens, item.priority
        step = self.steps.arrival_step(req_id)
        quoted = json.dumps(req_id)
        self.marks.reqs[req_id] = Req(num_prompt, quoted, '{"req":' + quoted + ',"n":1,"start":')
        detail: RequestDetail = {
            "num_prompt_tokens": num_prompt,
            "max_tokens": max_tokens,
            "priority": priority,
        }
        if prompt is not None:  # (None: a prompt given as embeddings)
            # The prompt itself is not sent, its blocks' content keys are (a Mooncake
            # export's hash ids). Only the first num_prompt tokens: a streaming-input
            # session's later updates extend the same list.
            detail["prompt_block_hashes"] = prompt_block_hashes(prompt, num_tokens=num_prompt)
            detail["prompt_block_tokens"] = PROMPT_BLOCK_TOKENS
        return [
            (
                FrameType.REQUEST,
                request_payload(req_id, RequestMark.ARRIVED, step, t - self.t0, detail),
            )
        ]

    def _frames(self, step: Step) -> list[Frame]:
        s, u = step.scheduled, step.updated
        running, waiting, free = self.queues
        if s is not None:
            running, waiting, free = s.running, s.waiting, s.free
        t_begin = s.t_start if s is not None else u.t_start if u is not None else self.t0
        t_start = t_begin - self.t0
        frames: list[Frame] = self.marks.aborted(s.so, step.index, t_start) if s else []
        outs = no_outputs()
        accepted: dict[str, int] = {}
        updated_step = None
        end = (running, waiting, free)
        t_finish = s.t_end if s is not None else t_begin
        if u is not None:
            outs = self.marks.outputs(u.outputs)
            batch = self.steps.batch_of(u.so)
            if batch is not None:
                updated_step = batch[0]
                accepted = self._accepted(batch[1], u.generated)
                self.steps.applied(batch[1])
            end = (u.running_end, u.waiting_end, u.free_end)
            t_finish = u.t_end
        self.queues = end
        forward_ms = (
            max(u.t_start - s.t_end, 0.0) * 1e3 if (s is not None and u is not None) else 0.0
        )
        overhead = (s.t_end - s.t_start if s else 0.0) + (u.t_end - u.t_start if u else 0.0)
        preempted = s.preempted if s else []
        b = s.batch if s else None
        waiting_reasons, waiting_detail = self._waiting(s)
        iteration = iteration_payload(
            step=step.index,
            t_start=t_start,
            duration=max(t_finish - t_begin, 0.0),
            forward_ms=forward_ms,
            overhead_us=overhead * 1e6,
            simulated=False,
            scheduled=b.rows if b else Rows([]),
            new=b.new if b else [],
            resumed=b.resumed if b else [],
            preempted=[
                {"req": r, "reason": why, "tokens_lost": lost} for r, lost, why in preempted
            ],
            finished=[{"req": r, "reason": why} for r, why in outs.finished],
            arrived=step.arrived,
            rejected=[],
            sampled=outs.sampled,
            num_running=running,
            num_waiting=waiting,
            num_running_end=end[0],
            num_waiting_end=end[1],
            max_num_batched_tokens=self.max_tokens,
            num_scheduled_tokens=int(s.so.total_num_scheduled_tokens) if s else 0,
            max_num_seqs=self.max_seqs,
            prefill_tokens=b.prefill if b else 0,
            decode_tokens=b.decode if b else 0,
            kv_total=self.total_blocks,
            kv_used=max(self.total_blocks - free, 0),
            kv_cached_free=0,
            kv_hit_tokens=b.hits if b else 0,
            kv_used_end=max(self.total_blocks - end[2], 0),
            blocks=[],
            waiting_reasons=waiting_reasons,
            config_version=0,
            updated_step=updated_step,
            accepted=accepted,
            appended=outs.appended,
            placeholders=dict(self.steps.in_flight) if self.async_scheduling else None,
            spec_tokens=sum(b.spec.values()) if b else 0,
            waiting_detail=waiting_detail,
        )
        frames.append((FrameType.ITERATION, iteration))
        t_end = t_finish - self.t0
        frames += self.marks.step(step.index, t_start, t_end, iteration, preempted, outs.first)
        return frames

    @staticmethod
    def _accepted(sched: Scheduled, generated: dict[str, int] | None) -> dict[str, int]:
        """Drafts accepted per request whose drafts this output verified."""
        spec = sched.batch.spec
        if not spec or not generated:
            return {}
        return {r: generated[r] - 1 for r in spec if generated.get(r)}

    def _waiting(self, s: Scheduled | None) -> tuple[dict[str, str], dict[str, Any]]:
        """The step's waiting reasons and their numbers (batchscope_vllm.waiting)."""
        cap: Capture | None = s.waits if s is not None else None
        if s is None or cap is None or self.limits is None:
            return {}, {}
        b = s.batch
        facts = StepFacts(
            used=int(s.so.total_num_scheduled_tokens),
            num_scheduled=len(s.so.num_scheduled_tokens),
            running=s.running,
            free=s.free,
            num_preempted=len(s.preempted),
            num_decodes=b.num_decodes,
            decode_tokens=b.decode,
            prefill_chunks=b.prefill_chunks,
            prefill_tokens=b.prefill,
            largest=b.largest,
        )
        try:
            return reasons(cap, self.limits, facts)
        except DEGRADES_ON:  # (a waiting request lacks what the reasons read)
            self.limits.lay.degraded.note("waiting_reasons")
            return {}, {}
