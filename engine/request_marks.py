"""The lifecycle marks of the engine's requests (protocol.lifecycle decides which marks a
step or a stop makes; this says what our engine's requests tell in them): a step's
marks, and the `aborted` marks of an abort or a stop. Pure: `Engine` emits them.
"""

from __future__ import annotations

from typing import Any

from engine.events import IterationEvent
from engine.request import Request
from engine.runner.tokenizer import Tokenizer
from protocol.codes import RequestMark
from protocol.lifecycle import Mark, step_marks, stop_marks


def text(tokenizer: Tokenizer | None, key: str, token_ids: list[int]) -> dict[str, str]:
    """{key: decoded text} when the runner has a tokenizer (the torch runner), else {}."""
    if tokenizer is None:
        return {}
    try:
        return {key: tokenizer.decode(list(token_ids))}
    except Exception:  # a tokenizer that cannot decode these ids: ids only
        return {}


def marks_of_step(
    event: IterationEvent,
    finished: list[Request],
    first_token_seen: set[str],
    tokenizer: Tokenizer | None,
) -> list[Mark]:
    """The marks of the step `event` records; `finished`: the requests it finished.
    `first_token_seen` (the requests that sampled a token, kept across steps) is updated."""
    seen = first_token_seen
    first: list[str] = []
    for req_id in event.sampled_req_ids:
        if req_id not in seen:
            seen.add(req_id)
            first.append(req_id)
    ends: list[tuple[str, dict[str, Any]]] = []
    for request in finished:
        seen.discard(request.request_id)
        detail = {
            "reason": request.get_finished_reason(),
            "num_output_tokens": request.num_output_tokens,
            "num_preemptions": request.num_preemptions,
            "num_cached_tokens": max(request.num_cached_tokens, 0),
            "output_token_ids": request.output_token_ids,
            **text(tokenizer, "output_text", request.output_token_ids),
        }
        ends.append((request.request_id, detail))
    return step_marks(
        event.step,
        event.t_start,
        event.t_start + event.duration,
        scheduled=event.new_req_ids,
        resumed=event.resumed_req_ids,
        preempted=[(p.req_id, p.tokens_lost) for p in event.preempted],
        first_token=first,
        finished=ends,
    )


def abort_detail(request: Request, at_stop: bool) -> dict[str, Any]:
    """What an `aborted` mark tells of `request`: token counts (and, at a stop, its
    preemptions and output ids too). Taken before the request is finished."""
    if not at_stop:
        return {
            "num_output_tokens": request.num_output_tokens,
            "num_cached_tokens": max(request.num_cached_tokens, 0),
        }
    return {
        "num_output_tokens": request.num_output_tokens,
        "num_preemptions": request.num_preemptions,
        "num_cached_tokens": max(request.num_cached_tokens, 0),
        "output_token_ids": list(request.output_token_ids),
    }


def abort_marks(
    next_step: int, t: float, ended: list[tuple[str, dict[str, Any]]], at_stop: bool
) -> list[Mark]:
    """The `aborted` marks (reason `abort`) of the requests `ended` (request, its
    `abort_detail`): an abort's at step `next_step` (the step about to run); a stop's at
    the last step that ran (protocol.lifecycle.stop_marks)."""
    if at_stop:
        return stop_marks(next_step, t, ended)
    return [Mark(r, RequestMark.ABORTED, next_step, t, {"reason": "abort", **d}) for r, d in ended]
