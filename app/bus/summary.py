"""The per-step summary every node publishes, always: a few numbers per step, close to the
"forward pass metrics" of Dynamo and SGLang (docs/fleet.md lists every field)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SUMMARY_FIELDS = (
    "step",  # the engine step number
    "t",  # wall-clock time (Unix seconds) the step's frame left the engine
    "dur_ms",  # step time: schedule + forward + update, ms
    "running",  # requests running at the step's start (num_running)
    "waiting",  # requests waiting at the step's start (num_waiting)
    "scheduled_reqs",  # requests given tokens this step
    "prefill_tokens",  # scheduled prompt (prefill) tokens
    "decode_tokens",  # scheduled decode tokens
    "max_tokens",  # the token budget (max_num_batched_tokens)
    "kv_used",  # KV blocks in use at the step's start
    "kv_total",  # KV blocks in the pool
    "kv_hit_tokens",  # prefix-cache hit tokens this step
    "preempted",  # requests preempted this step
    "finished",  # requests finished this step
    "arrived",  # requests arrived this step
    "stalled",  # 1: requests waited while nothing at all was scheduled
)


def _count(value: Any) -> int:
    try:
        return len(value)
    except TypeError:
        return 0


def step_summary(data: Mapping[str, Any], wall: float) -> list[float | int]:
    """The summary of one `iteration` frame's data, as a row in SUMMARY_FIELDS order."""
    queues = data.get("queues") or {}
    budget = data.get("budget") or {}
    kv = data.get("kv") or {}
    used = int(budget.get("used", 0))
    waiting = int(queues.get("waiting", 0))
    return [
        int(data.get("step", 0)),
        round(wall, 4),
        round(float(data.get("duration", 0.0)) * 1000, 3),
        int(queues.get("running", 0)),
        waiting,
        _count(data.get("scheduled")),
        int(budget.get("prefill", 0)),
        int(budget.get("decode", 0)),
        int(budget.get("max_tokens", 0)),
        int(kv.get("used", 0)),
        int(kv.get("total", 0)),
        int(kv.get("hit_tokens", 0)),
        _count(data.get("preempted")),
        _count(data.get("finished")),
        _count(data.get("arrived")),
        1 if waiting > 0 and used == 0 else 0,
    ]


def as_dict(row: list[float | int]) -> dict[str, float | int]:
    return dict(zip(SUMMARY_FIELDS, row, strict=False))
