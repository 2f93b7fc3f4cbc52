"""The data of every frame (docs/protocol.md), typed: what producers build and readers read.

TypedDicts, not classes: a frame is built once per step as a dict literal and encoded to
JSON at once, so the types cost nothing at run time (no object per frame or row, no
conversion before encoding) while mypy checks every key in every producer and reader.
Optional keys live in a `total=False` subclass (Python 3.10 has no NotRequired without
typing_extensions, and the vLLM adapter's wheel supports 3.10).

app.frames.validate validates the same trees with pydantic (bounds, patterns);
tests/protocol/test_wire_models.py proves the two have the same fields. What the dashboard
derives from the frames (request rows, snapshots) is typed in protocol.views.
"""

from __future__ import annotations

from typing import Any, TypedDict

BlockChange = list[Any]
"""`[block_id, state (codes.BlockState), owner request id or None, ref_cnt]`."""

KnobValue = int | float | bool | str | None
Knobs = dict[str, KnobValue]
"""An engine's knobs by name (max_num_seqs, policy, vllm_version, ...): a session's
config, a config frame's changes. Each value a scalar; which knobs a producer has
depends on it (ours: engine.config.EngineConfig.as_dict; vLLM's: the adapter's)."""


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


class _KVUseBase(TypedDict):
    total: int
    used: int
    cached_free: int
    hit_tokens: int
    used_end: int


class KVUse(_KVUseBase, total=False):
    prefix_queries: int
    """The step's prefix-cache queries, counted as the producer's vLLM release counts them."""
    prefix_hits: int


class WaitingDetail(TypedDict, total=False):
    """The numbers behind a step's waiting reasons (engine.waiting, docs/protocol.md):
    the gate that held the queue, the policy and the head of the queue, and that gate's
    figures. Read by the dashboard's reason texts (engine.waiting.waiting_text)."""

    gate: str
    """codes.WaitingReason"""
    policy: str
    head: str
    num_waiting: int
    # token_budget
    budget_used: int
    budget_max: int
    budget_left: int
    num_decodes: int
    decode_tokens: int
    num_prefill_chunks: int
    prefill_tokens: int
    largest_chunk_req: str
    largest_chunk_tokens: int
    padded_tokens: int
    """A decode padded to 1 + K tokens (speculative decoding) that did not fit."""
    # max_num_seqs, max_num_active_seqs
    max_num_seqs: int
    max_num_active_seqs: int
    num_running: int
    # kv_blocks, kv_watermark
    blocks_needed: int
    blocks_free: int
    blocks_used: int
    blocks_usable: int
    full_sequence: bool
    watermark_blocks: int
    # prefill_throttled
    prefill_schedule_interval: int
    steps_held: int
    until_step: int
    throttled_by_coordinator: bool
    # cache_aware_order (0.34+): who moved ahead and how deep its cached prefix was
    cache_aware_ahead: str
    cache_aware_cached_tokens: int
    cache_aware_window: int
    # no_chunking_fit, preemption_this_step, static_batch
    tokens_needed: int
    num_preempted: int
    batch_size: int


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
    """Request id -> codes.WaitingReason: every request waiting at this step, or with
    `waiting_default` only the exceptions to it."""
    config_version: int


class IterationData(_IterationBase, total=False):
    """An `iteration` frame's data: one engine step."""

    updated_step: int | None
    waiting_default: str
    """codes.WaitingReason of every request waiting at this step that `waiting_reasons`
    does not name (absent: `waiting_reasons` names them all)."""
    accepted: dict[str, int]
    appended: dict[str, int]
    placeholders: dict[str, int]
    spec_tokens: int
    padding: int
    waiting_detail: WaitingDetail


class RequestDetail(TypedDict, total=False):
    """What a request mark may carry (producers may add more)."""

    num_prompt_tokens: int | None
    max_tokens: int | None
    priority: int | None
    num_output_tokens: int | None
    num_cached_tokens: int | None
    reason: str | None
    prompt_token_ids: list[int] | None
    prompt_block_hashes: list[str] | None
    """Arrivals of a producer that sends no prompt (a vLLM node): the chain keys of the
    prompt's `prompt_block_tokens`-token blocks, 16 hex digits each (protocol.blocks)."""
    prompt_block_tokens: int | None


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
    changes: Knobs
    config: Knobs


class SessionMeta(TypedDict, total=False):
    """A session's metadata (protocol.session.session_meta): what the hub keeps, the
    `opened` frame carries and the sessions table records. A producer may add keys of its
    own (a lab point's, a node's announce): the ones read by name are typed here."""

    name: str
    source: str
    """`local`, `rerun`, `lab` or `node:NAME`."""
    engine: str
    runner: str
    simulated: bool
    model: str
    device: str
    config: Knobs
    started_at: float
    describe: dict[str, Any]
    """Our runner's own description (local sessions and `engine --push` nodes)."""
    node: str
    served_model_name: str
    rerun_of: str
    relayed: bool
    """Published by another dashboard process (app.live.relay)."""
    paused: bool
    vllm_version: str
    failure: dict[str, Any]
    """The engine stopped where vLLM's scheduler fails an assertion (`step`, `assertion`,
    `detail`: a `failed` session frame; engine.faults)."""


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
    config: Knobs | None
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
