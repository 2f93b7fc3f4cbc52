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
from dataclasses import dataclass
from typing import Any

from protocol import control
from protocol.codes import MessageType
from protocol.producer import ProducerCore

PREFIX = "batchscope"
STREAM = "BATCHSCOPE"
NODES_STREAM = "BATCHSCOPE_NODES"
MAX_MSG_BYTES = 512 * 1024
"""A frames message stays under this (NATS's default max payload is 1 MB)."""
MAX_LEASE_S = 3600.0
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def token(node: str) -> str:
    """`node` as one subject token: letters, digits, _ and - (others become _)."""
    return _UNSAFE.sub("_", node)[:100] or "_"


def subject(node: str, kind: str) -> str:
    return f"{PREFIX}.{token(node)}.{kind}"


def frames_message(
    node: str, session: str, prev: int, batch: list[tuple[int, str]], stats: Mapping[str, Any]
) -> tuple[bytes, str]:
    """One `.frames` message: the encoded frames `[(seq, text), ...]` (already JSON) after
    `prev` (the seq stored before them, so a message that overtook a lost one waits for
    it), then the producer's stats; and its JetStream de-duplication id."""
    body = (
        f'{{"node":{json.dumps(node)},"session":{json.dumps(session)},"prev":{prev},"frames":['
        + ",".join(text for _, text in batch)
        + f",{json.dumps({'type': MessageType.STATS, **stats})}]}}"
    )
    return body.encode(), f"{session}:{batch[0][0]}-{batch[-1][0]}"


@dataclass(slots=True)
class Detail:
    """Who a node owes its full frames on the bus (`.frames`), sans I/O: a dashboard's
    detail lease (until `lease_until`), an incident window (through `stop_at`), or everyone
    (`always`). Our engine's bus node (app.bus.node) and the vLLM adapter's
    (batchscope_vllm.bus) both keep one and answer `.control` requests with it."""

    always: bool
    lease_until: float = 0.0
    stop_at: int = 0
    """With no lease: publish frames up to this seq (an incident window), then stop."""
    cursor: int = 0
    """Frames up to this seq are stored on the bus or owed to nobody (a new lease starts
    after the seq the asking dashboard has; holes left by drops are skipped)."""
    prev_stored: int = 0
    """The last seq of the last frames message stored: each message names it as `prev`,
    so a dashboard tells a message that overtook another from a real gap."""

    def __post_init__(self) -> None:
        if self.always:
            self.lease_until = float("inf")

    def detailing(self, now: float) -> bool:
        """`now`: wall-clock time (time.time())."""
        return now < self.lease_until or self.cursor < self.stop_at

    def stored(self, last: int) -> None:
        """The bus stored a frames message ending with seq `last`."""
        self.cursor = self.prev_stored = last

    def answer(self, req: Mapping[str, Any], frames: ProducerCore, now: float) -> dict[str, Any]:
        """The reply to a `detail` (a lease for `for_s` s) or `window` (the last `seconds`
        s, once) request from a dashboard that has this session through `after_seq`:
        where the frames it gets start, or an error."""
        kind = req.get("type")
        if kind not in ("detail", "window"):
            return dict(control.error(f"control: unknown type {kind!r}"))
        after = req.get("after_seq", 0)
        after = after if isinstance(after, int) and after >= 0 else 0
        if kind == "detail":
            seconds = req.get("for_s", 60)
            if not isinstance(seconds, int | float) or not 0 <= seconds <= MAX_LEASE_S:
                return dict(control.error(f"detail: for_s must be 0-{MAX_LEASE_S:g}"))
            was = self.detailing(now)
            if not self.always:
                self.lease_until = max(self.lease_until, now + float(seconds))
            self.cursor = min(self.cursor, after) if was else after
        else:
            seconds = req.get("seconds", 60)
            if not isinstance(seconds, int | float) or seconds <= 0:
                return dict(control.error("window: seconds must be > 0"))
            start = frames.first_at(now - float(seconds))
            self.cursor = max(after, start - 1) if start else frames.seq
            self.stop_at = frames.seq
        self.prev_stored = min(self.prev_stored, self.cursor)
        return {
            "type": "detail",
            "session": frames.session,
            "from_seq": max(self.cursor + 1, frames.oldest),
            "oldest_seq": frames.oldest,
            "last_seq": frames.seq,
            "lease_s": max(0.0, min(self.lease_until - now, MAX_LEASE_S)),
        }


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
