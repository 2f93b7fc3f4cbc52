"""The fleet bus's shared names (docs/fleet.md): subjects per node and kind, the JetStream
streams and their settings, and the per-step summary every node publishes. Standard
library only: the dashboard (app.bus), our engine nodes and the vLLM adapter
(batchscope_vllm.bus) all take them from here, so a summary row means the same everywhere.

Subjects (`<node>` is the node's name made subject-safe by `token()`):
- `batchscope.<node>.summary`: per-step summaries, always (stream BATCHSCOPE);
- `batchscope.<node>.frames`: full protocol frames, while someone watches (stream BATCHSCOPE);
- `batchscope.<node>.announce`: the node's announce, last one kept (stream BATCHSCOPE_NODES);
- `batchscope.<node>.control`: requests to the node (core NATS request/reply, not stored).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

PREFIX = "batchscope"
STREAM = "BATCHSCOPE"
NODES_STREAM = "BATCHSCOPE_NODES"
MAX_MSG_BYTES = 512 * 1024
"""A frames message stays under this (NATS's default max payload is 1 MB)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def token(node: str) -> str:
    """`node` as one subject token: letters, digits, _ and - (others become _)."""
    return _UNSAFE.sub("_", node)[:100] or "_"


def subject(node: str, kind: str) -> str:
    return f"{PREFIX}.{token(node)}.{kind}"


def node_of(subj: str) -> str:
    """The subject-safe node token of a `batchscope.<node>.<kind>` subject."""
    parts = subj.split(".")
    return parts[1] if len(parts) == 3 else ""


def frames_message(
    node: str, session: str, prev: int, batch: list[tuple[int, str]], stats: Mapping[str, Any]
) -> tuple[bytes, str]:
    """One `.frames` message: the encoded frames `[(seq, text), ...]` (already JSON) after
    `prev` (the seq stored before them, so a message that overtook a lost one waits for
    it), then the producer's stats; and its JetStream de-duplication id."""
    body = (
        f'{{"node":{json.dumps(node)},"session":{json.dumps(session)},"prev":{prev},"frames":['
        + ",".join(text for _, text in batch)
        + f",{json.dumps({'type': 'stats', **stats})}]}}"
    )
    return body.encode(), f"{session}:{batch[0][0]}-{batch[-1][0]}"


def stream_fields(max_age_s: float, max_bytes: int) -> list[tuple[str, dict[str, Any]]]:
    """(name, settings) of the two streams, as `StreamConfig` keyword arguments besides
    file storage and discarding the oldest first."""
    return [
        (
            STREAM,
            {
                "subjects": [f"{PREFIX}.*.summary", f"{PREFIX}.*.frames"],
                "max_age": max_age_s,
                "max_bytes": max_bytes,
                "duplicate_window": min(120.0, max_age_s),
            },
        ),
        (NODES_STREAM, {"subjects": [f"{PREFIX}.*.announce"], "max_msgs_per_subject": 1}),
    ]


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
