"""What the engine tells the world: one IterationEvent per step, plus lifecycle and config
records. Plain immutable data; consumers (web, recorder) convert them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from engine.outputs import ScheduledChunk
from engine.reasons import WaitingReasons
from protocol.wire import WaitingDetail


class BlockChange(NamedTuple):
    """A KV block's state after this step (only blocks that changed are listed)."""

    block_id: int
    state: str
    """free | cached (free but reusable by hash) | used | shared (ref_cnt > 1)."""
    owner: str | None
    """The request that allocated it (shared blocks keep their first owner)."""
    ref_cnt: int


class Preemption(NamedTuple):
    req_id: str
    reason: str
    tokens_lost: int
    """num_computed_tokens thrown away; they will be recomputed."""


class Finish(NamedTuple):
    req_id: str
    reason: str
    """stop | length | abort"""


class Rejection(NamedTuple):
    req_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class KVStats:
    total: int
    """Usable blocks (the null block excluded)."""
    used: int
    """Blocks with a reference, right after schedule()."""
    cached_free: int
    """Free blocks still holding a prefix-cache hash."""
    hit_tokens: int
    """Prefix-cache hit tokens credited to admissions this step."""


@dataclass(frozen=True, slots=True)
class IterationEvent:
    """One engine step: the plan, what it cost and what it changed."""

    step: int
    t_start: float
    """Seconds since the engine started (engine clock)."""
    duration: float
    """Seconds the whole step took (schedule + forward + update + event)."""
    forward_ms: float
    """The runner's time (modelled when simulated)."""
    overhead_us: float
    """Scheduler time: schedule + update + event build, in microseconds."""
    simulated: bool
    chunks: tuple[ScheduledChunk, ...]
    new_req_ids: tuple[str, ...]
    resumed_req_ids: tuple[str, ...]
    preempted: tuple[Preemption, ...]
    finished: tuple[Finish, ...]
    arrived: tuple[str, ...]
    """Requests added to WAITING just before this step's schedule."""
    rejected: tuple[Rejection, ...]
    sampled_req_ids: tuple[str, ...]
    num_running: int
    num_waiting: int
    """Queue lengths right after schedule()."""
    num_running_end: int
    num_waiting_end: int
    """Queue lengths after update_from_output()."""
    max_num_batched_tokens: int
    num_scheduled_tokens: int
    max_num_seqs: int
    prefill_tokens: int
    decode_tokens: int
    kv: KVStats
    kv_blocks_used_end: int
    kv_changes: tuple[BlockChange, ...]
    waiting_reasons: WaitingReasons
    """Each request waiting after schedule(): a default and its exceptions."""
    config_version: int
    updated_step: int | None = None
    """The step whose batch output update_from_output() applied in this step (sync: this
    step; async: an earlier one, or None when no output was applied)."""
    accepted_tokens: dict[str, int] = field(default_factory=dict)
    """Speculative decoding: drafts accepted per request whose drafts were verified."""
    appended_tokens: dict[str, int] = field(default_factory=dict)
    """Tokens appended per request by this step's update."""
    num_output_placeholders: dict[str, int] = field(default_factory=dict)
    """Async scheduling: tokens still in flight per request, after this step."""
    num_spec_tokens: int = 0
    """Draft tokens scheduled this step (counted in num_scheduled_tokens)."""
    num_padding_tokens: int = 0
    """Static batching: wasted positions computed this step (padding, idle rows)."""
    waiting_detail: WaitingDetail = field(default_factory=lambda: WaitingDetail())
    """The numbers behind `waiting_reasons` (engine.waiting): the gate, the head of the
    queue and e.g. the blocks it needed against the free blocks."""
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    """vLLM's prefix-cache stats of this step (tokens queried / hit by new requests),
    counted as the session's release counts them: 0.20 at every lookup, 0.27+ when a
    request is admitted."""


@dataclass(frozen=True, slots=True)
class RequestEvent:
    """A lifecycle mark of one request, from which TTFT, ITL, queue time and E2E follow."""

    req_id: str
    kind: str
    """arrived | rejected | scheduled | first_token | preempted | resumed | finished | aborted"""
    step: int
    t: float
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ConfigEvent:
    """A knob change and the step from which it applies."""

    step: int
    config_version: int
    changes: dict[str, Any]
    config: dict[str, Any]


Event = IterationEvent | RequestEvent | ConfigEvent


class EventSink(Protocol):
    def emit(self, event: Event) -> None:
        """Must return at once: the engine thread never waits on a consumer."""


class NullSink:
    def emit(self, event: Event) -> None:
        del event  # deliberately dropped


class ListSink:
    """Keeps every event; for tests and the offline simulator."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def iterations(self) -> list[IterationEvent]:
        return [e for e in self.events if isinstance(e, IterationEvent)]

    def request_events(self) -> list[RequestEvent]:
        return [e for e in self.events if isinstance(e, RequestEvent)]
