"""Frame payloads every producer builds the same way (docs/protocol.md): an `iteration`
and a `request` mark. Our engine's converter (app.frames.convert) and the vLLM adapter
(batchscope_vllm.frames) both call these, so the layout, the key names and the rounding
live here once (their types: protocol.wire). Standard library only: the vLLM adapter
imports it next to vLLM.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from protocol.wire import (
    BlockChange,
    IterationData,
    PreemptedRow,
    ReqReason,
    RequestDetail,
    RequestMarkData,
    WaitingDetail,
)


def _t(seconds: float) -> float:
    return round(seconds, 6)


def iteration_payload(
    *,
    step: int,
    t_start: float,
    duration: float,
    forward_ms: float,
    overhead_us: float,
    simulated: bool,
    scheduled: Any,
    new: Iterable[str],
    resumed: Iterable[str],
    preempted: list[PreemptedRow],
    finished: list[ReqReason],
    arrived: Iterable[str],
    rejected: list[ReqReason],
    sampled: Iterable[str],
    num_running: int,
    num_waiting: int,
    num_running_end: int,
    num_waiting_end: int,
    max_num_batched_tokens: int,
    num_scheduled_tokens: int,
    max_num_seqs: int,
    prefill_tokens: int,
    decode_tokens: int,
    kv_total: int,
    kv_used: int,
    kv_cached_free: int,
    kv_hit_tokens: int,
    kv_used_end: int,
    blocks: list[BlockChange],
    waiting_reasons: Mapping[str, str],
    config_version: int,
    updated_step: int | None = None,
    accepted: Mapping[str, int] | None = None,
    appended: Mapping[str, int] | None = None,
    placeholders: Mapping[str, int] | None = None,
    spec_tokens: int = 0,
    padding: int = 0,
    waiting_detail: Mapping[str, Any] | None = None,
    prefix_cache: tuple[int, int] | None = None,
    waiting_default: str | None = None,
) -> IterationData:
    """One step's `iteration` data. Times in seconds since the session started
    (`forward_ms` in ms, `overhead_us` in µs). `scheduled`: the `[{req, n, start, phase,
    prefix_hit, sample[, spec][, pad]}]` rows, or an object the producer's encoder splices
    in as text. `updated_step`: the step whose batch output this step applied (sync: this
    step; async scheduling: an earlier one, or None). The optional maps are sent only when
    they say something: `accepted` drafts per request, `appended` tokens per request (when
    any is not 1), async output `placeholders` per request, draft `spec_tokens`, static
    batching `padding`, and `waiting_detail` (the numbers behind `waiting_reasons`).
    `waiting_default`: the reason of every request waiting at this step that
    `waiting_reasons` does not name (then it holds only the exceptions; without it,
    `waiting_reasons` names every waiting request). `prefix_cache`: (queries, hits), the
    step's prefix-cache stats counted as the producer's vLLM release counts them, sent by
    a producer that counts them (our engine) as `kv.prefix_queries` / `kv.prefix_hits`,
    even when 0."""
    out: IterationData = {
        "step": step,
        "t_start": _t(t_start),
        "duration": _t(duration),
        "forward_ms": round(forward_ms, 4),
        "overhead_us": round(overhead_us, 1),
        "simulated": simulated,
        "scheduled": scheduled,
        "new": list(new),
        "resumed": list(resumed),
        "preempted": preempted,
        "finished": finished,
        "arrived": list(arrived),
        "rejected": rejected,
        "sampled": list(sampled),
        "queues": {
            "running": num_running,
            "waiting": num_waiting,
            "running_end": num_running_end,
            "waiting_end": num_waiting_end,
        },
        "budget": {
            "max_tokens": max_num_batched_tokens,
            "used": num_scheduled_tokens,
            "max_seqs": max_num_seqs,
            "prefill": prefill_tokens,
            "decode": decode_tokens,
        },
        "kv": {
            "total": kv_total,
            "used": kv_used,
            "cached_free": kv_cached_free,
            "hit_tokens": kv_hit_tokens,
            "used_end": kv_used_end,
        },
        "blocks": blocks,
        "waiting_reasons": dict(waiting_reasons),
        "config_version": config_version,
        "updated_step": updated_step,
    }
    if waiting_default is not None:
        out["waiting_default"] = waiting_default
    if prefix_cache is not None:
        out["kv"]["prefix_queries"], out["kv"]["prefix_hits"] = prefix_cache
    if accepted:
        out["accepted"] = dict(accepted)
    if appended and any(n != 1 for n in appended.values()):
        out["appended"] = dict(appended)
    if placeholders:
        out["placeholders"] = dict(placeholders)
    if spec_tokens:
        out["spec_tokens"] = spec_tokens
    if padding:
        out["padding"] = padding
    if waiting_detail:
        out["waiting_detail"] = cast(WaitingDetail, dict(waiting_detail))
    return out


def request_payload(
    req_id: str, kind: str, step: int, t: float, detail: Mapping[str, Any] | None = None
) -> RequestMarkData:
    """A `request` lifecycle mark (arrived, scheduled, first_token, preempted, resumed,
    finished, aborted, rejected) of request `req_id` at `step`, `t` seconds in."""
    mark_detail: RequestDetail = dict(detail or {})  # type: ignore[assignment]
    return {"req": req_id, "kind": kind, "step": step, "t": _t(t), "detail": mark_detail}
