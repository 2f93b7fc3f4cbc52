"""A simulate run's step-by-step result folded from its events as they come (an EventSink):
each step's record and each request's record handed on as soon as it is final, so the
caller keeps them (engine.simulate.run_scenario) or writes them out (engine.result_file)
and the fold itself holds only what the engine holds (the live requests), the drafts in
flight, the running totals and 8 bytes a step (each step's scheduler time, for the exact
median and p90 of `timing`).
"""

from __future__ import annotations

import statistics
from array import array
from collections.abc import Callable, Collection, Iterable
from typing import Any

from engine.events import Event, IterationEvent, RequestEvent
from engine.scenario import ScenarioRequest
from protocol.codes import RequestMark

StepRecord = dict[str, Any]
RequestRecord = dict[str, Any]

# A request's record is final once its finish is this many steps behind the latest step:
# the batch queue holds at most 2 batches, so no later output can still name it.
_SETTLE_STEPS = 2


class ResultFold:
    """Sink of one run's events. `arrived` (each request as it is added) and `idle` (a gap
    before a step) come from the loop that drives the engine (engine.simulate.drive);
    `on_step(record)` gets each step's record as the step ends, `on_request(id, record)`
    each request's once it is final; `close(requests)` hands on the records still open
    (in `requests`' order, those never arrived included) and returns the run's totals."""

    def __init__(
        self,
        on_step: Callable[[StepRecord], None],
        on_request: Callable[[str, RequestRecord], None],
    ) -> None:
        self._on_step = on_step
        self._on_request = on_request
        self._open: dict[str, RequestRecord] = {}
        self._closed: set[str] = set()
        self._idle: dict[int, float] = {}
        # Draft tokens scheduled per step, until the step's output verifies them.
        self._spec: dict[int, dict[str, int]] = {}
        self._overheads = array("d")
        self._waiting: dict[str, None] = {}
        """The requests waiting after the latest step's schedule (an ordered set), to
        resolve its compact waiting reasons into the step record's full map."""
        self._aborted: set[str] = set()
        """Requests aborted since the latest step."""
        self.num_steps = 0
        self.total_scheduled_tokens = 0
        self.total_padding_tokens = 0
        self.total_preemptions = 0
        self.tokens_recomputed = 0
        self.total_draft_tokens = 0
        self.total_accepted_tokens = 0
        self.completed = 0

    def arrived(self, req: ScenarioRequest, step: int) -> None:
        rec = empty_request_record(req)
        if req.arrival_time_ms is not None:
            rec["arrival_step"] = step
            rec["arrival_ms"] = req.arrival_time_ms
        self._open[req.id] = rec

    def idle(self, step: int, ms: float) -> None:
        self._idle[step] = ms

    def emit(self, event: Event) -> None:
        if isinstance(event, IterationEvent):
            self._step(event)
        elif isinstance(event, RequestEvent):
            if event.kind == RequestMark.ABORTED:
                self._aborted.add(event.req_id)
            rec = self._open.get(event.req_id)
            if rec is not None:
                _apply_request_event(rec, event)

    def _step(self, ev: IterationEvent) -> None:
        follow_waiting(self._waiting, ev, self._aborted)
        self._aborted.clear()
        record = step_record(ev, self._waiting)
        idle_ms = self._idle.pop(ev.step, None)
        if idle_ms is not None:
            record["idle_ms"] = idle_ms
        self.num_steps += 1
        self.total_scheduled_tokens += ev.num_scheduled_tokens
        self.total_padding_tokens += ev.num_padding_tokens
        self.total_preemptions += len(ev.preempted)
        self.tokens_recomputed += sum(p.tokens_lost for p in ev.preempted)
        self._overheads.append(ev.overhead_us)
        for chunk in ev.chunks:
            rec = self._open.get(chunk.req_id)
            if chunk.is_new and rec and rec["prefix_cache_hit_tokens_first_admission"] is None:
                rec["prefix_cache_hit_tokens_first_admission"] = chunk.num_prefix_hit_tokens
        if record["scheduled_spec_tokens"]:
            self._spec[ev.step] = record["scheduled_spec_tokens"]
        if ev.accepted_tokens:
            # Drafts count when their batch's output verifies them (vLLM's spec-decode stats).
            drafts = self._spec.pop(ev.updated_step, {}) if ev.updated_step is not None else {}
            for req_id, accepted in ev.accepted_tokens.items():
                rec = self._open[req_id]
                rec["num_draft_tokens"] += drafts.get(req_id, 0)
                rec["num_accepted_tokens"] += accepted
        self._on_step(record)
        settled = [
            req_id
            for req_id, rec in self._open.items()
            if rec["finish_step"] is not None and rec["finish_step"] <= ev.step - _SETTLE_STEPS
        ]
        for req_id in settled:
            self._hand_on(req_id, self._open.pop(req_id))

    def _hand_on(self, req_id: str, rec: RequestRecord) -> None:
        self._closed.add(req_id)
        self.total_draft_tokens += rec["num_draft_tokens"]
        self.total_accepted_tokens += rec["num_accepted_tokens"]
        if rec["finish_reason"] in ("stop", "length"):
            self.completed += 1
        self._on_request(req_id, rec)

    def close(self, requests: Iterable[ScenarioRequest]) -> dict[str, Any]:
        """Hands on every record not yet handed on; returns the run's totals and timing."""
        for req in requests:
            if req.id in self._closed:
                continue
            rec = self._open.pop(req.id) if req.id in self._open else empty_request_record(req)
            self._hand_on(req.id, rec)
        return {
            "num_steps": self.num_steps,
            "total_draft_tokens": self.total_draft_tokens,
            "total_accepted_tokens": self.total_accepted_tokens,
            "total_scheduled_tokens": self.total_scheduled_tokens,
            "total_padding_tokens": self.total_padding_tokens,
            "total_preemptions": self.total_preemptions,
            "tokens_recomputed": self.tokens_recomputed,
            "completed": self.completed,
            "timing": step_timing(sorted(self._overheads)),
        }


def step_timing(overheads_us: list[float]) -> dict[str, float]:
    """Median and p90 of per-step scheduler time (sorted input, microseconds)."""
    if not overheads_us:
        return {"median_step_us": 0.0, "p90_step_us": 0.0}
    return {
        "median_step_us": round(statistics.median(overheads_us), 2),
        "p90_step_us": round(overheads_us[int(0.9 * (len(overheads_us) - 1))], 2),
    }


def empty_request_record(r: ScenarioRequest) -> RequestRecord:
    """A scenario request's entry of the result, before anything happened to it."""
    return {
        "arrival_step": r.arrival_step,
        "num_prompt_tokens": len(r.prompt_token_ids),
        "max_tokens": r.sampling_params.max_tokens,
        "priority": r.priority,
        "first_scheduled_step": None,
        "first_token_step": None,
        "finish_step": None,
        "finish_reason": None,
        "num_preemptions": 0,
        "num_output_tokens": 0,
        "prefix_cache_hit_tokens_first_admission": None,
        "output_token_ids": [],
        "num_draft_tokens": 0,
        "num_accepted_tokens": 0,
    }


def follow_waiting(
    waiting: dict[str, None], ev: IterationEvent, aborted: Collection[str] = ()
) -> None:
    """`waiting` (the requests waiting after the previous step's schedule, an ordered
    set) becomes those waiting after `ev`'s schedule, from its changes alone:
    O(changes). `aborted`: the requests aborted since the previous step (their
    `aborted` marks; one may have arrived for this step too)."""
    for req_id in aborted:
        waiting.pop(req_id, None)
    waiting.update(dict.fromkeys(r for r in ev.arrived if r not in aborted))
    for req_id in ev.new_req_ids:
        waiting.pop(req_id, None)
    for req_id in ev.resumed_req_ids:
        waiting.pop(req_id, None)
    waiting.update(dict.fromkeys(p.req_id for p in ev.preempted))


def step_record(ev: IterationEvent, waiting: Iterable[str] = ()) -> StepRecord:
    """One step's record; `waiting`: the requests waiting after its schedule (its
    reasons come compact: a default and the exceptions)."""
    return {
        "step": ev.step,
        "arrived": list(ev.arrived),
        "scheduled": {c.req_id: c.num_tokens for c in ev.chunks},
        "new_req_ids": list(ev.new_req_ids),
        "resumed_req_ids": list(ev.resumed_req_ids),
        "preempted_req_ids": [p.req_id for p in ev.preempted],
        "prefix_cache_hit_tokens": {
            c.req_id: c.num_prefix_hit_tokens for c in ev.chunks if c.is_new
        },
        "num_running": ev.num_running,
        "num_waiting": ev.num_waiting,
        "kv_blocks_used": ev.kv.used,
        "sampled_req_ids": list(ev.sampled_req_ids),
        "finished_req_ids": [f.req_id for f in ev.finished],
        "num_running_end": ev.num_running_end,
        "num_waiting_end": ev.num_waiting_end,
        "kv_blocks_used_end": ev.kv_blocks_used_end,
        "waiting_reasons": ev.waiting_reasons.resolve(waiting),
        "updated_step": ev.updated_step,
        "scheduled_spec_tokens": {
            c.req_id: len(c.spec_token_ids) for c in ev.chunks if c.spec_token_ids
        },
        "accepted_tokens": dict(ev.accepted_tokens),
        "appended_tokens": dict(ev.appended_tokens),
        "num_padding_tokens": ev.num_padding_tokens,
        "forward_ms": ev.forward_ms,
    }


def _apply_request_event(rec: RequestRecord, ev: RequestEvent) -> None:
    if ev.kind == RequestMark.SCHEDULED and rec["first_scheduled_step"] is None:
        rec["first_scheduled_step"] = ev.step
    elif ev.kind == RequestMark.FIRST_TOKEN and rec["first_token_step"] is None:
        rec["first_token_step"] = ev.step
    elif ev.kind == RequestMark.PREEMPTED:
        rec["num_preemptions"] += 1
    elif ev.kind == RequestMark.FINISHED:
        rec["finish_step"] = ev.step
        rec["finish_reason"] = ev.detail["reason"]
        rec["num_output_tokens"] = ev.detail["num_output_tokens"]
        rec["output_token_ids"] = list(ev.detail["output_token_ids"])
    elif ev.kind in (RequestMark.REJECTED, RequestMark.ABORTED):
        rec["finish_step"] = ev.step
        rec["finish_reason"] = "rejected" if ev.kind == RequestMark.REJECTED else "abort"
        if ev.kind == RequestMark.REJECTED:
            rec["reject_reason"] = ev.detail["reason"]
