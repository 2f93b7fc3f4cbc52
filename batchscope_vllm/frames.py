"""Build protocol v1 frames (docs/protocol.md) from the tuples the scheduler hooks queue.

Runs on the sender thread only. It reads vLLM objects the engine no longer changes: a
SchedulerOutput once schedule() returned it, the EngineCoreOutputs update_from_output()
returned. Per request it keeps the little it needs to tell prefill from decode and to
fill the lifecycle marks (TTFT, ITL, finished details); a request is forgotten when it
finishes. Items are paired by SchedulerOutput, so async scheduling (schedule N+1 before
update N) pairs correctly; if the queue dropped one half of a step, the step is skipped.

The payloads are laid out by app.protocol.frames, as our own engine's are (that module
and app.protocol.envelope use the standard library only). An iteration frame's
`scheduled` rows (one per running request: the bulk of the bytes) are formatted straight
to JSON text (`Rows`), skipping a dict per row and its generic encoding; `encode_data()`
splices them into the frame's data.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from app.protocol.envelope import encode
from app.protocol.frames import iteration_payload, request_payload

Frame = tuple[str, dict[str, Any]]
ROW = '{"req":%s,"n":%d,"start":%d,"phase":"%s","prefix_hit":%d,"sample":%s}'
DECODE_TAIL = ',"phase":"decode","prefix_hit":0,"sample":true}'  # after a decode row's start
_PLACEHOLDER = "\x00rows"
_PLACEHOLDER_JSON = json.dumps(_PLACEHOLDER)


class Rows:
    """An iteration frame's `scheduled` list, already JSON text."""

    __slots__ = ("text",)

    def __init__(self, rows: list[str]) -> None:
        self.text = "[" + ",".join(rows) + "]"


def encode_data(data: dict[str, Any]) -> str:
    """Frame data as compact JSON, with `Rows` spliced in as they are."""
    rows = data.get("scheduled")
    if not isinstance(rows, Rows):
        return encode(data)
    return encode({**data, "scheduled": _PLACEHOLDER}).replace(_PLACEHOLDER_JSON, rows.text, 1)


@dataclass(slots=True)
class _Req:
    num_prompt: int
    quoted: str  # the id as a JSON string
    head: str  # a plain decode row up to its start
    num_output: int = 0
    num_preemptions: int = 0
    cached: int | None = None  # prefix-cache hit tokens at first admission
    preempted: bool = False
    output_ids: list[int] = field(default_factory=list)


class FrameBuilder:
    def __init__(self, max_tokens: int, max_seqs: int, total_blocks: int) -> None:
        self.t0 = time.perf_counter()
        self.max_tokens = max_tokens
        self.max_seqs = max_seqs
        self.total_blocks = total_blocks
        self.reqs: dict[str, _Req] = {}
        self.arrivals: dict[int, list[str]] = {}
        self.pending: dict[int, tuple[Any, ...]] = {}  # id(SchedulerOutput) -> "s" item
        self.reported_finished: set[str] = set()

    def build(self, item: tuple[Any, ...]) -> list[Frame]:
        kind = item[0]
        if kind == "a":
            return self._arrival(item)
        if kind == "s":
            self.pending[id(item[1])] = item
            return []
        return self._step(item)

    def _arrival(self, item: tuple[Any, ...]) -> list[Frame]:
        _, req_id, num_prompt, max_tokens, priority, t, step = item
        quoted = json.dumps(req_id)
        self.reqs[req_id] = _Req(num_prompt, quoted, '{"req":' + quoted + ',"n":1,"start":')
        self.arrivals.setdefault(step, []).append(req_id)
        detail = {"num_prompt_tokens": num_prompt, "max_tokens": max_tokens, "priority": priority}
        return [("request", request_payload(req_id, "arrived", step, t - self.t0, detail))]

    def _step(self, item: tuple[Any, ...]) -> list[Frame]:
        _, so, outputs, t2, t3, running_end, waiting_end, free_end = item
        sched = self.pending.pop(id(so), None)
        if sched is None:
            return []  # its schedule half was dropped
        _, _, step, t0, t1, running, waiting, free, preempted = sched
        for key in [k for k, v in self.pending.items() if v[2] < step]:
            del self.pending[key]  # their update halves were dropped
        for old in [k for k in self.arrivals if k < step]:
            del self.arrivals[old]  # arrivals of steps that were dropped
        t_start, t_end = t0 - self.t0, t3 - self.t0
        frames: list[Frame] = self._aborted(so, step, t_start)
        scheduled, new, resumed, split = self._scheduled(so)
        pre = [{"req": r, "reason": why, "tokens_lost": lost} for r, lost, why in preempted]
        sampled, finished, first = self._outputs(outputs)
        iteration = iteration_payload(
            step=step,
            t_start=t_start,
            duration=t3 - t0,
            forward_ms=max(t2 - t1, 0.0) * 1e3,
            overhead_us=((t1 - t0) + (t3 - t2)) * 1e6,
            simulated=False,
            scheduled=scheduled,
            new=new,
            resumed=resumed,
            preempted=pre,
            finished=[{"req": r, "reason": why} for r, why in finished],
            arrived=self.arrivals.pop(step, []),
            rejected=[],
            sampled=sampled,
            num_running=running,
            num_waiting=waiting,
            num_running_end=running_end,
            num_waiting_end=waiting_end,
            max_num_batched_tokens=self.max_tokens,
            num_scheduled_tokens=int(so.total_num_scheduled_tokens),
            max_num_seqs=self.max_seqs,
            prefill_tokens=split[0],
            decode_tokens=split[1],
            kv_total=self.total_blocks,
            kv_used=max(self.total_blocks - free, 0),
            kv_cached_free=0,
            kv_hit_tokens=split[2],
            kv_used_end=max(self.total_blocks - free_end, 0),
            blocks=[],
            waiting_reasons={},
            config_version=0,
        )
        frames.append(("iteration", iteration))
        frames += self._lifecycle(step, t_start, t_end, iteration, preempted, first)
        return frames

    def _aborted(self, so: Any, step: int, t: float) -> list[Frame]:
        """Requests finished outside update_from_output (aborts) since the last step."""
        frames: list[Frame] = []
        for req_id in so.finished_req_ids:
            if req_id in self.reported_finished:
                self.reported_finished.discard(req_id)
            elif self.reqs.pop(req_id, None) is not None:
                frames.append(("request", request_payload(req_id, "aborted", step, t, {})))
        return frames

    def _scheduled(self, so: Any) -> tuple[Rows, list[str], list[str], tuple[int, int, int]]:
        starts = {d.req_id: d.num_computed_tokens for d in so.scheduled_new_reqs}
        new_ids = set(starts)
        cached = so.scheduled_cached_reqs
        starts.update(zip(cached.req_ids, cached.num_computed_tokens, strict=False))
        resumed_ids = getattr(cached, "resumed_req_ids", None) or ()
        reqs = self.reqs
        rows: list[str] = []
        new: list[str] = []
        resumed: list[str] = []
        prefill = decode = hits = 0
        for req_id, n in so.num_scheduled_tokens.items():
            start = starts.get(req_id, 0)
            rec = reqs.get(req_id)
            if n == 1 and rec is not None and req_id not in new_ids:
                num_tokens = rec.num_prompt + rec.num_output
                if start == num_tokens - 1 and rec.num_output and req_id not in resumed_ids:
                    decode += 1  # the common case, a plain decode: a cached row head
                    rows.append(rec.head + str(start) + DECODE_TAIL)
                    continue
            hit = 0
            if req_id in new_ids or req_id in resumed_ids:
                hit = start
                hits += hit
                if req_id in resumed_ids or (rec is not None and rec.preempted):
                    if rec is not None:
                        rec.preempted = False
                    resumed.append(req_id)
                else:
                    new.append(req_id)
                    if rec is not None and rec.cached is None:
                        rec.cached = hit
            if rec is None:
                quoted, is_prefill, sample = json.dumps(req_id), n > 1, True
            else:
                quoted, num_tokens = rec.quoted, rec.num_prompt + rec.num_output
                is_prefill = start + 1 < num_tokens or num_tokens == rec.num_prompt
                sample = start + n >= num_tokens
            if is_prefill:
                prefill += n
                phase = "prefill"
            else:
                decode += n
                phase = "decode"
            rows.append(ROW % (quoted, n, start, phase, hit, "true" if sample else "false"))
        return Rows(rows), new, resumed, (prefill, decode, hits)

    def _outputs(self, outputs: Any) -> tuple[list[str], list[tuple[str, str]], list[str]]:
        """Sampled, finished (with reasons) and first-token ids, in vLLM's output order;
        counts the new tokens."""
        sampled: list[str] = []
        finished: list[tuple[str, str]] = []
        first: list[str] = []
        reqs = self.reqs
        for eco in outputs.values():
            for out in eco.outputs:
                req_id = out.request_id
                tokens = out.new_token_ids
                if tokens:
                    sampled.append(req_id)
                    rec = reqs.get(req_id)
                    if rec is not None:
                        if not rec.num_output:
                            first.append(req_id)
                        rec.num_output += len(tokens)
                        rec.output_ids.extend(tokens)
                if out.finish_reason is not None:
                    finished.append((req_id, str(out.finish_reason)))
        return sampled, finished, first

    def _lifecycle(
        self,
        step: int,
        t_start: float,
        t_end: float,
        it: dict[str, Any],
        preempted: list[tuple[str, int, str]],
        first: list[str],
    ) -> list[Frame]:
        """The request marks of one step, in our engine's order."""
        frames: list[Frame] = [
            ("request", request_payload(r, "scheduled", step, t_start)) for r in it["new"]
        ]
        frames += [("request", request_payload(r, "resumed", step, t_start)) for r in it["resumed"]]
        for req_id, lost, _ in preempted:
            rec = self.reqs.get(req_id)
            if rec is not None:
                rec.preempted = True
                rec.num_preemptions += 1
            frames.append(
                (
                    "request",
                    request_payload(req_id, "preempted", step, t_end, {"tokens_lost": lost}),
                )
            )
        frames += [("request", request_payload(r, "first_token", step, t_end)) for r in first]
        for f in it["finished"]:
            req_id = f["req"]
            self.reported_finished.add(req_id)
            rec = self.reqs.pop(req_id, None) or _Req(0, "", "")
            detail = {
                "reason": f["reason"],
                "num_output_tokens": rec.num_output,
                "num_preemptions": rec.num_preemptions,
                "num_cached_tokens": rec.cached or 0,
                "output_token_ids": rec.output_ids,
            }
            frames.append(("request", request_payload(req_id, "finished", step, t_end, detail)))
        return frames
