"""A run's figures folded from its events as they come (an EventSink), so a sweep point
holds what the engine holds and not every event of the run: per step two floats (when it
began and ended, on the runner's clock), per request a few numbers, and the latency
samples (floats). The figures equal engine.run_metrics over the full result.
"""

from __future__ import annotations

from array import array
from typing import Any

from engine.events import Event, IterationEvent, RequestEvent
from engine.run_metrics import LATENCIES, RunTotals, figures
from protocol.codes import RequestMark


class _Req:
    """One request's marks (steps), as engine.simulate's result records them."""

    __slots__ = (
        "arrival_ms",
        "arrival_step",
        "finish_reason",
        "finish_step",
        "first_scheduled_step",
        "first_token_step",
        "num_output_tokens",
        "num_prompt_tokens",
    )

    def __init__(self, num_prompt_tokens: int, arrival_step: int, arrival_ms: float | None):
        self.num_prompt_tokens = num_prompt_tokens
        self.arrival_step = arrival_step
        self.arrival_ms = arrival_ms
        self.first_scheduled_step: int | None = None
        self.first_token_step: int | None = None
        self.finish_step: int | None = None
        self.finish_reason: str | None = None
        self.num_output_tokens = 0


class RunAggregate:
    """Sink of one run's events; `arrived` (each request as it is added) and `idle` (a
    gap before a step) come from the loop that drives the engine (engine.simulate.drive)."""

    def __init__(self) -> None:
        self.t_ms = 0.0
        self.begin: dict[int, float] = {}
        self.end: dict[int, float] = {}
        self.requests: dict[str, _Req] = {}
        # One inter-token gap per output token: packed doubles (8 bytes each), not floats.
        self.itl = array("d")
        self.last_token_at: dict[str, float] = {}
        self.totals = RunTotals()
        self._idle_ms = 0.0
        # Draft tokens scheduled per step, until the step's output verifies them.
        self._spec: dict[int, dict[str, int]] = {}
        self.finish_reasons: dict[str, int] = {}

    def arrived(self, req_id: str, num_prompt_tokens: int, step: int, at_ms: float | None) -> None:
        self.requests[req_id] = _Req(num_prompt_tokens, step, at_ms)

    def idle(self, ms: float) -> None:
        self._idle_ms += ms

    def emit(self, event: Event) -> None:
        if isinstance(event, IterationEvent):
            self._step(event)
        elif isinstance(event, RequestEvent):
            self._mark(event)

    def _step(self, ev: IterationEvent) -> None:
        self.t_ms += self._idle_ms
        self._idle_ms = 0.0
        self.begin[ev.step] = self.t_ms
        self.t_ms += ev.forward_ms
        now = self.end[ev.step] = self.t_ms
        last = self.last_token_at
        for req_id, n in ev.appended_tokens.items():
            prev = last.get(req_id)
            if prev is not None and n:
                self.itl.append((now - prev) / n)
            last[req_id] = now
        tot = self.totals
        tot.steps += 1
        tot.scheduled_tokens += ev.num_scheduled_tokens
        tot.padding_tokens += ev.num_padding_tokens
        tot.batch_members += len(ev.chunks)
        tot.preemptions += len(ev.preempted)
        tot.tokens_recomputed += sum(p.tokens_lost for p in ev.preempted)
        tot.kv_peak = max(tot.kv_peak, ev.kv.used)
        spec: dict[str, int] = {}
        for chunk in ev.chunks:
            if chunk.is_new:
                tot.prefix_hits += chunk.num_prefix_hit_tokens
            if chunk.spec_token_ids:
                spec[chunk.req_id] = len(chunk.spec_token_ids)
        if spec:
            self._spec[ev.step] = spec
        if ev.accepted_tokens:
            drafts = self._spec.pop(ev.updated_step, {}) if ev.updated_step is not None else {}
            for req_id, accepted in ev.accepted_tokens.items():
                tot.draft_tokens += drafts.get(req_id, 0)
                tot.accepted_tokens += accepted

    def _mark(self, ev: RequestEvent) -> None:
        rec = self.requests.get(ev.req_id)
        if rec is None:
            return
        kind = ev.kind
        if kind == RequestMark.SCHEDULED and rec.first_scheduled_step is None:
            rec.first_scheduled_step = ev.step
        elif kind == RequestMark.FIRST_TOKEN and rec.first_token_step is None:
            rec.first_token_step = ev.step
        elif kind == RequestMark.FINISHED:
            rec.finish_step = ev.step
            rec.finish_reason = ev.detail["reason"]
            rec.num_output_tokens = ev.detail["num_output_tokens"]
        elif kind in (RequestMark.REJECTED, RequestMark.ABORTED):
            rec.finish_step = ev.step
            rec.finish_reason = "rejected" if kind == RequestMark.REJECTED else "abort"

    def metrics(self, usable_blocks: int | None = None) -> dict[str, float]:
        """engine.run_metrics' figures of the run so far."""
        begin, end = self.begin, self.end

        def start_of(step: int) -> float:
            return begin.get(step, end.get(step - 1, 0.0))

        samples: dict[str, list[float]] = {name: [] for name in LATENCIES}
        samples["itl_ms"] = list(self.itl)
        tot = RunTotals(**{k: getattr(self.totals, k) for k in RunTotals.__slots__})
        tot.total_ms = self.t_ms
        reasons: dict[str, int] = {}
        for rec in self.requests.values():
            reason = rec.finish_reason
            key = reason or "unfinished"
            reasons[key] = reasons.get(key, 0) + 1
            if rec.first_scheduled_step is not None:
                tot.prefix_queries += rec.num_prompt_tokens
            if reason is None or reason == "rejected":
                continue
            if reason in ("stop", "length"):
                tot.completed += 1
            arrival = rec.arrival_ms if rec.arrival_ms is not None else start_of(rec.arrival_step)
            if rec.first_scheduled_step is not None:
                samples["queue_ms"].append(start_of(rec.first_scheduled_step) - arrival)
            if rec.first_token_step is not None and rec.finish_step is not None:
                ttft = end[rec.first_token_step] - arrival
                samples["ttft_ms"].append(ttft)
                e2e = end[rec.finish_step] - arrival
                samples["e2e_ms"].append(e2e)
                if rec.num_output_tokens > 1:
                    samples["tpot_ms"].append((e2e - ttft) / (rec.num_output_tokens - 1))
            tot.prompt_tokens += rec.num_prompt_tokens
            tot.output_tokens += rec.num_output_tokens
        self.finish_reasons = reasons
        tot.rejected, tot.aborted = reasons.get("rejected", 0), reasons.get("abort", 0)
        return figures(samples, tot, usable_blocks)

    def summary(self) -> dict[str, Any]:
        """How the arrived requests ended: {finish reason or "unfinished": count}."""
        return dict(self.finish_reasons)
