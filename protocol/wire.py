"""The data of every frame (docs/protocol.md), typed: what producers build and readers read.

TypedDicts, not classes: a frame is built once per step as a dict literal and encoded to
JSON at once, so the types cost nothing at run time (no object per frame or row, no
conversion before encoding) while mypy checks every key in every producer and reader.
Optional keys live in a `total=False` subclass (Python 3.10 has no NotRequired without
typing_extensions, and the vLLM adapter's wheel supports 3.10).

app.protocol.models validates the same trees with pydantic (bounds, patterns);
tests/app/protocol/test_wire_models.py proves the two have the same fields.
"""

from __future__ import annotations

from typing import Any, TypedDict

BlockChange = list[Any]
"""`[block_id, state (codes.BlockState), owner request id or None, ref_cnt]`."""


class _ScheduledRowBase(TypedDict):
    req: str
    n: int
    start: int
    phase: str
    """codes.Phase"""
    prefix_hit: int
    sample: bool


class ScheduledRow(_ScheduledRowBase, total=False):
    """One request's part of a step: `n` tokens from position `start`."""

    spec: int
    """Draft tokens among the n (speculative decoding)."""
    pad: int
    """Static batching: pad positions computed beside this prompt."""


class PreemptedRow(TypedDict):
    req: str
    reason: str
    tokens_lost: int


class ReqReason(TypedDict):
    """A finished or rejected request and why."""

    req: str
    reason: str


class Queues(TypedDict):
    running: int
    waiting: int
    running_end: int
    waiting_end: int


class Budget(TypedDict):
    max_tokens: int
    used: int
    max_seqs: int
    prefill: int
    decode: int


class KVUse(TypedDict):
    total: int
    used: int
    cached_free: int
    hit_tokens: int
    used_end: int


class _IterationBase(TypedDict):
    step: int
    t_start: float
    duration: float
    forward_ms: float
    overhead_us: float
    simulated: bool
    scheduled: Any
    """list[ScheduledRow], or an object the producer's encoder splices in as JSON text."""
    new: list[str]
    resumed: list[str]
    preempted: list[PreemptedRow]
    finished: list[ReqReason]
    arrived: list[str]
    rejected: list[ReqReason]
    sampled: list[str]
    queues: Queues
    budget: Budget
    kv: KVUse
    blocks: list[BlockChange]
    waiting_reasons: dict[str, str]
    """Request id -> codes.WaitingReason."""
    config_version: int


class IterationData(_IterationBase, total=False):
    """An `iteration` frame's data: one engine step."""

    updated_step: int | None
    accepted: dict[str, int]
    appended: dict[str, int]
    placeholders: dict[str, int]
    spec_tokens: int
    padding: int
    waiting_detail: dict[str, Any]
    """`gate` (the reason code) and that gate's numbers."""


class RequestDetail(TypedDict, total=False):
    """What a request mark may carry (producers may add more)."""

    num_prompt_tokens: int | None
    max_tokens: int | None
    priority: int | None
    num_output_tokens: int | None
    num_cached_tokens: int | None
    reason: str | None
    prompt_token_ids: list[int] | None


class _RequestMarkBase(TypedDict):
    req: str
    kind: str
    """codes.RequestMark"""
    step: int
    t: float


class RequestMarkData(_RequestMarkBase, total=False):
    """A `request` frame's data: one lifecycle mark of one request."""

    detail: RequestDetail


class ConfigData(TypedDict):
    """A `config` frame's data: the knobs changed at `step`, and all of them after."""

    step: int
    config_version: int
    changes: dict[str, Any]
    config: dict[str, Any]


class _SessionBase(TypedDict):
    event: str
    """codes.SessionEvent (others pass through)."""


class SessionData(_SessionBase, total=False):
    """A `session` frame's data: opened (with the session's metadata), state, closed..."""

    name: str | None
    source: str | None
    runner: str | None
    model: str | None
    device: str | None
    simulated: bool | None
    paused: bool | None
    config: dict[str, Any] | None
    describe: dict[str, Any] | None
    started_at: float | None


FrameData = IterationData | RequestMarkData | ConfigData | SessionData


class _EnvelopeBase(TypedDict):
    v: int
    type: str
    """codes.FrameType"""
    session: str
    seq: int
    data: dict[str, Any]


class Envelope(_EnvelopeBase, total=False):
    """A frame as parsed: what protocol.envelope.envelope() writes."""

    ts: float | None


Segment = list[Any]
"""`[phase or waiting|preempted, first step, last step or None, tokens]` of a request row."""


class RequestRow(TypedDict):
    """A request as the live table and a columns snapshot carry it (keys in column order)."""

    req: str
    status: str
    """codes.RequestStatus"""
    num_prompt_tokens: int
    num_tokens: int
    num_computed_tokens: int
    max_tokens: int
    priority: int
    num_preemptions: int
    prefix_hit: int
    arrived_step: int
    arrived_t: float
    first_scheduled_step: int | None
    first_token_t: float | None
    last_token_t: float | None
    finish_t: float | None
    finish_step: int | None
    finish_reason: str | None
    waiting_reason: str | None
    num_draft_tokens: int
    num_accepted_tokens: int
    placeholders: int
    segments: list[Segment]


class _StepSummaryBase(TypedDict):
    step: int
    t: float
    prefill: int
    decode: int
    max_tokens: int
    seqs: int
    max_seqs: int
    running: int
    waiting: int
    kv_used: int
    kv_cached: int
    kv_total: int
    preempted: int
    updated_step: int | None
    spec: int
    accepted: int
    padding: int


class StepSummary(_StepSummaryBase, total=False):
    """One step of a snapshot's `history` (the charts and the step table). Only the latest
    steps keep their plan: `{req: n}`, and the ids finished and preempted."""

    plan: dict[str, int]
    finished: list[str]
    preempted_ids: list[str]


class _SnapshotBase(TypedDict):
    session: str
    meta: dict[str, Any]
    seq: int
    step: int
    t: float
    config: dict[str, Any]
    config_version: int
    config_marks: list[dict[str, Any]]
    """`{step, changes, version}` of each config change."""
    paused: bool
    simulated: bool
    requests: Any
    """list[RequestRow], or `{"columns": ROW_COLUMNS, "rows": [[...], ...]}`."""
    history: list[StepSummary]
    totals: dict[str, int]
    waiting_detail: dict[str, Any]


class SnapshotData(_SnapshotBase, total=False):
    """A `snapshot` frame's data: a session's state for a viewer that joins late."""

    blocks: list[BlockChange]
    replay: dict[str, Any]
    """A recording's replay: `{steps, step, playing, speed}`."""


ROW_COLUMNS: tuple[str, ...] = tuple(RequestRow.__annotations__)
"""A request row's keys, in the order of a columns snapshot (segments last)."""
