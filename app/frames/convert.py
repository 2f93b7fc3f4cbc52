"""Engine events to frame data (docs/protocol.md), field by field, on purpose: renaming an
engine field breaks here, loudly, instead of silently changing what the browser receives.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.events import (
    ConfigEvent,
    Event,
    IterationEvent,
    RequestEvent,
)
from engine.outputs import ScheduledChunk
from protocol.codes import FrameType, Phase
from protocol.frames import iteration_payload, request_payload
from protocol.wire import (
    ConfigData,
    IterationData,
    RequestMarkData,
    ScheduledRow,
)


def iteration_data(ev: IterationEvent) -> IterationData:
    return iteration_payload(
        step=ev.step,
        t_start=ev.t_start,
        duration=ev.duration,
        forward_ms=ev.forward_ms,
        overhead_us=ev.overhead_us,
        simulated=ev.simulated,
        scheduled=[scheduled_item(c) for c in ev.chunks],
        new=ev.new_req_ids,
        resumed=ev.resumed_req_ids,
        preempted=[
            {"req": p.req_id, "reason": p.reason, "tokens_lost": p.tokens_lost}
            for p in ev.preempted
        ],
        finished=[{"req": f.req_id, "reason": f.reason} for f in ev.finished],
        arrived=ev.arrived,
        rejected=[{"req": r.req_id, "reason": r.reason} for r in ev.rejected],
        sampled=ev.sampled_req_ids,
        num_running=ev.num_running,
        num_waiting=ev.num_waiting,
        num_running_end=ev.num_running_end,
        num_waiting_end=ev.num_waiting_end,
        max_num_batched_tokens=ev.max_num_batched_tokens,
        num_scheduled_tokens=ev.num_scheduled_tokens,
        max_num_seqs=ev.max_num_seqs,
        prefill_tokens=ev.prefill_tokens,
        decode_tokens=ev.decode_tokens,
        kv_total=ev.kv.total,
        kv_used=ev.kv.used,
        kv_cached_free=ev.kv.cached_free,
        kv_hit_tokens=ev.kv.hit_tokens,
        kv_used_end=ev.kv_blocks_used_end,
        blocks=[[b.block_id, b.state, b.owner, b.ref_cnt] for b in ev.kv_changes],
        waiting_reasons=ev.waiting_reasons.exceptions,
        waiting_default=ev.waiting_reasons.default,
        config_version=ev.config_version,
        updated_step=ev.updated_step,
        accepted=ev.accepted_tokens,
        appended=ev.appended_tokens,
        placeholders=ev.num_output_placeholders,
        spec_tokens=ev.num_spec_tokens,
        padding=ev.num_padding_tokens,
        waiting_detail=ev.waiting_detail,
        prefix_cache=(ev.prefix_cache_queries, ev.prefix_cache_hits),
    )


def scheduled_item(c: ScheduledChunk) -> ScheduledRow:
    """One `scheduled` row; `spec` (drafts) and `pad` (static padding) only when set."""
    item: ScheduledRow = {
        "req": c.req_id,
        "n": c.num_tokens,
        "start": c.num_computed_before,
        "phase": Phase.PREFILL if c.is_prefill else Phase.DECODE,
        "prefix_hit": c.num_prefix_hit_tokens,
        "sample": c.sample,
    }
    if c.spec_token_ids:
        item["spec"] = len(c.spec_token_ids)
    if c.num_padding_tokens:
        item["pad"] = c.num_padding_tokens
    return item


def request_data(ev: RequestEvent) -> RequestMarkData:
    detail = dict(ev.detail)
    if "output_token_ids" in detail:
        detail["output_token_ids"] = list(detail["output_token_ids"])
    return request_payload(ev.req_id, ev.kind, ev.step, ev.t, detail)


def config_data(ev: ConfigEvent) -> ConfigData:
    return {
        "step": ev.step,
        "config_version": ev.config_version,
        "changes": dict(ev.changes),
        "config": dict(ev.config),
    }


def event_to_frame(ev: Event) -> tuple[str, Mapping[str, Any]]:
    """(frame type, frame data) for an engine event."""
    if isinstance(ev, IterationEvent):
        return FrameType.ITERATION, iteration_data(ev)
    if isinstance(ev, RequestEvent):
        return FrameType.REQUEST, request_data(ev)
    return FrameType.CONFIG, config_data(ev)
