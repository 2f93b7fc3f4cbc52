"""The request lifecycle marks of the vLLM adapter's frames (protocol.lifecycle, as our
engine's), and the little kept per request for them.

Runs on the sender thread only, for frames.FrameBuilder. Per live request (rows.Req,
registered at its arrival) it counts outputs and preemptions, for the first-token mark
and the finished (or aborted) details; a request is forgotten when it finishes, when it
is aborted outside update_from_output, or at a stop.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from batchscope_vllm.rows import Req
from protocol.codes import FrameType, RequestMark
from protocol.frames import request_payload
from protocol.lifecycle import step_marks, stop_marks
from protocol.wire import FrameData, IterationData

Frame = tuple[str, FrameData]
"""A frame to send: its type (codes.FrameType) and its data."""


class Outputs(NamedTuple):
    """What one update's EngineCoreOutputs tell, in vLLM's output order."""

    sampled: list[str]
    finished: list[tuple[str, str]]  # (request, finish reason)
    first: list[str]  # requests that got their first token
    appended: dict[str, int]  # new tokens per request (empty when each got one)


def no_outputs() -> Outputs:
    """A step that applied no output."""
    return Outputs([], [], [], {})


class RequestMarks:
    def __init__(self) -> None:
        self.reqs: dict[str, Req] = {}
        self.reported_finished: set[str] = set()

    def outputs(self, outputs: Any) -> Outputs:
        """Sampled, finished (with reasons) and first-token ids, in vLLM's output order;
        counts the new tokens."""
        got = no_outputs()
        sampled, finished, first, appended = got
        several = False  # a request got more than one token (else `appended` is not sent)
        reqs = self.reqs
        for eco in outputs.values():
            for out in eco.outputs:
                req_id = out.request_id
                tokens = out.new_token_ids
                if tokens:
                    sampled.append(req_id)
                    count = len(tokens)
                    appended[req_id] = count
                    several = several or count != 1
                    rec = reqs.get(req_id)
                    if rec is not None:
                        if not rec.num_output:
                            first.append(req_id)
                        rec.num_output += len(tokens)
                        rec.output_ids.extend(tokens)
                if out.finish_reason is not None:
                    finished.append((req_id, str(out.finish_reason)))
        return got if several else got._replace(appended={})

    def aborted(self, so: Any, step: int, t: float) -> list[Frame]:
        """Requests finished outside update_from_output (aborts) since the last step."""
        frames: list[Frame] = []
        for req_id in so.finished_req_ids:
            if req_id in self.reported_finished:
                self.reported_finished.discard(req_id)
            elif self.reqs.pop(req_id, None) is not None:
                frames.append(
                    (FrameType.REQUEST, request_payload(req_id, RequestMark.ABORTED, step, t, {}))
                )
        return frames

    def step(
        self,
        step: int,
        t_start: float,
        t_end: float,
        it: IterationData,
        preempted: list[tuple[str, int, str]],
        first: list[str],
    ) -> list[Frame]:
        """The request marks of one step, after its iteration frame `it`."""
        for req_id, _, _ in preempted:
            rec = self.reqs.get(req_id)
            if rec is not None:
                rec.preempted = True
                rec.num_preemptions += 1
        ends: list[tuple[str, dict[str, Any]]] = []
        for f in it["finished"]:
            req_id = f["req"]
            self.reported_finished.add(req_id)
            rec = self.reqs.pop(req_id, None) or Req(0, "", "")
            ends.append((req_id, {"reason": f["reason"], **_end_detail(rec)}))
        marks = step_marks(
            step,
            t_start,
            t_end,
            scheduled=it["new"],
            resumed=it["resumed"],
            preempted=[(req_id, lost) for req_id, lost, _ in preempted],
            first_token=first,
            finished=ends,
        )
        return [(FrameType.REQUEST, request_payload(*mark)) for mark in marks]

    def stop(self, next_step: int, t: float) -> list[Frame]:
        """An `aborted` mark for every request still held, running or waiting, as vLLM's
        engine core aborts them at a stop (protocol.lifecycle.stop_marks); forgets them."""
        held = [(req_id, _end_detail(rec)) for req_id, rec in self.reqs.items()]
        self.reqs.clear()
        return [
            (FrameType.REQUEST, request_payload(*mark)) for mark in stop_marks(next_step, t, held)
        ]


def _end_detail(rec: Req) -> dict[str, Any]:
    """What a request's last mark (finished, or aborted at a stop) tells of it."""
    return {
        "num_output_tokens": rec.num_output,
        "num_preemptions": rec.num_preemptions,
        "num_cached_tokens": rec.cached or 0,
        "output_token_ids": rec.output_ids,
    }
