"""The request marks of one engine step (docs/protocol.md, `request` frames), and those of
a stop with requests in flight, derived once: our engine (engine.engine) and the vLLM
adapter (batchscope_vllm.frames) both call `step_marks` and `stop_marks`, so which marks a
step (or a stop) makes, in which order and at which time is the same for both. Each
producer says what happened; this says what that means.
Standard library only: the vLLM adapter imports it next to vLLM.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from protocol.codes import RequestMark


class Mark(NamedTuple):
    """One lifecycle mark: request `req` reached `kind` at `step`, `t` seconds in."""

    req: str
    kind: RequestMark
    step: int
    t: float
    detail: dict[str, Any]


def step_marks(
    step: int,
    t_start: float,
    t_end: float,
    *,
    scheduled: Iterable[str],
    resumed: Iterable[str],
    preempted: Iterable[tuple[str, int]],
    first_token: Iterable[str],
    finished: Iterable[tuple[str, Mapping[str, Any]]],
) -> list[Mark]:
    """The marks of step `step` (which started at `t_start` and ended at `t_end`), in this
    order: `scheduled` for the first time and `resumed` (after a preemption) at the start;
    `preempted` (request, tokens lost), the requests' `first_token` and `finished`
    (request, what its mark tells: reason, token counts...) at the end."""
    marks = [Mark(r, RequestMark.SCHEDULED, step, t_start, {}) for r in scheduled]
    marks += [Mark(r, RequestMark.RESUMED, step, t_start, {}) for r in resumed]
    marks += [
        Mark(r, RequestMark.PREEMPTED, step, t_end, {"tokens_lost": lost}) for r, lost in preempted
    ]
    marks += [Mark(r, RequestMark.FIRST_TOKEN, step, t_end, {}) for r in first_token]
    marks += [Mark(r, RequestMark.FINISHED, step, t_end, dict(d)) for r, d in finished]
    return marks


def stop_marks(
    next_step: int, t: float, held: Iterable[tuple[str, Mapping[str, Any]]]
) -> list[Mark]:
    """The marks of a stop with requests in flight: an engine told to stop aborts every
    request it still holds, running or waiting (vLLM's engine core at SIGINT/SIGTERM:
    `finish_requests(None, FINISHED_ABORTED)`, finish reason `abort`). Each of `held`
    (request, what its mark tells: token counts...) gets an `aborted` mark with reason
    `abort` at `t`, at the last step that ran (`next_step` - 1; step 0 if none did), so
    the recording at its last step shows every request ended; one that arrived after that
    step (its `arrived` mark names `next_step`) ends there too."""
    step = max(next_step - 1, 0)
    return [Mark(r, RequestMark.ABORTED, step, t, {**d, "reason": "abort"}) for r, d in held]
