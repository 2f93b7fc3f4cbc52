"""Engine events to frame data (docs/protocol.md), field by field, on purpose: renaming an
engine field breaks here, loudly, instead of silently changing what the browser receives.
"""

from __future__ import annotations

from typing import Any

from engine.events import (
    ConfigEvent,
    EngineSnapshot,
    Event,
    IterationEvent,
    RequestEvent,
)


def iteration_data(ev: IterationEvent) -> dict[str, Any]:
    return {
        "step": ev.step,
        "t_start": round(ev.t_start, 6),
        "duration": round(ev.duration, 6),
        "forward_ms": round(ev.forward_ms, 4),
        "overhead_us": round(ev.overhead_us, 1),
        "simulated": ev.simulated,
        "scheduled": [
            {
                "req": c.req_id,
                "n": c.num_tokens,
                "start": c.num_computed_before,
                "phase": "prefill" if c.is_prefill else "decode",
                "prefix_hit": c.num_prefix_hit_tokens,
                "sample": c.sample,
            }
            for c in ev.chunks
        ],
        "new": list(ev.new_req_ids),
        "resumed": list(ev.resumed_req_ids),
        "preempted": [
            {"req": p.req_id, "reason": p.reason, "tokens_lost": p.tokens_lost}
            for p in ev.preempted
        ],
        "finished": [{"req": f.req_id, "reason": f.reason} for f in ev.finished],
        "arrived": list(ev.arrived),
        "rejected": [{"req": r.req_id, "reason": r.reason} for r in ev.rejected],
        "sampled": list(ev.sampled_req_ids),
        "queues": {
            "running": ev.num_running,
            "waiting": ev.num_waiting,
            "running_end": ev.num_running_end,
            "waiting_end": ev.num_waiting_end,
        },
        "budget": {
            "max_tokens": ev.max_num_batched_tokens,
            "used": ev.num_scheduled_tokens,
            "max_seqs": ev.max_num_seqs,
            "prefill": ev.prefill_tokens,
            "decode": ev.decode_tokens,
        },
        "kv": {
            "total": ev.kv.total,
            "used": ev.kv.used,
            "cached_free": ev.kv.cached_free,
            "hit_tokens": ev.kv.hit_tokens,
            "used_end": ev.kv_blocks_used_end,
        },
        "blocks": [[b.block_id, b.state, b.owner, b.ref_cnt] for b in ev.kv_changes],
        "waiting_reasons": dict(ev.waiting_reasons),
        "config_version": ev.config_version,
    }


def request_data(ev: RequestEvent) -> dict[str, Any]:
    detail = dict(ev.detail)
    if "output_token_ids" in detail:
        detail["output_token_ids"] = list(detail["output_token_ids"])
    return {
        "req": ev.req_id,
        "kind": ev.kind,
        "step": ev.step,
        "t": round(ev.t, 6),
        "detail": detail,
    }


def config_data(ev: ConfigEvent) -> dict[str, Any]:
    return {
        "step": ev.step,
        "config_version": ev.config_version,
        "changes": dict(ev.changes),
        "config": dict(ev.config),
    }


def engine_snapshot_data(snap: EngineSnapshot) -> dict[str, Any]:
    """The engine's own view (used to seed a session's state and for checks)."""
    return {
        "step": snap.step,
        "config": dict(snap.config),
        "config_version": snap.config_version,
        "paused": snap.paused,
        "simulated": snap.simulated,
        "running": list(snap.running),
        "waiting": list(snap.waiting),
        "blocks": [[b.block_id, b.state, b.owner, b.ref_cnt] for b in snap.blocks],
    }


def event_to_frame(ev: Event) -> tuple[str, dict[str, Any]]:
    """(frame type, frame data) for an engine event."""
    if isinstance(ev, IterationEvent):
        return "iteration", iteration_data(ev)
    if isinstance(ev, RequestEvent):
        return "request", request_data(ev)
    if isinstance(ev, ConfigEvent):
        return "config", config_data(ev)
    return "engine_snapshot", engine_snapshot_data(ev)
