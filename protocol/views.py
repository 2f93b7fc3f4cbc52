"""What the dashboard derives from the frames and sends on, typed: a request row (the
fold's, and the table's JSON twin), a step of the history, a snapshot, the latency
summary. TypedDicts, as protocol.wire's; static/js/protocol.js carries ROW_COLUMNS.
The HTTP API answers and documents these very shapes (app.api_shapes)."""

from __future__ import annotations

from typing import Any, TypedDict

from protocol.wire import BlockChange, Knobs, WaitingDetail

Segment = list[Any]
"""`[kind (codes.SegmentKind), first step, last step or None, tokens]` of a request row."""


class _RowHead(TypedDict):
    """A request row's leading keys (the fold's rows and a recording's done rows)."""

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


class _RowArrival(TypedDict):
    arrived_step: int
    arrived_t: float


class _TableArrival(TypedDict):
    arrived_step: int | None
    """None: a recorded request whose arrival the recording lacks."""
    arrived_t: float | None
    """None: a recorded request whose arrival the recording lacks."""


class _RowTail(TypedDict):
    """A request row's keys after its arrival, but its speculative counts."""

    first_scheduled_step: int | None
    first_token_t: float | None
    last_token_t: float | None
    finish_t: float | None
    finish_step: int | None
    finish_reason: str | None
    waiting_reason: str | None


class RequestRow(_RowHead, _RowArrival, _RowTail):
    """A request as the fold keeps it and a snapshot carries it (keys in column order)."""

    num_draft_tokens: int
    num_accepted_tokens: int
    placeholders: int
    segments: list[Segment]


class TableRow(_RowHead, _TableArrival, _RowTail):
    """A row of the request table's JSON twin (/api/requests, and a recording's
    /api/sessions/ID/requests): a RequestRow without its segments, where a recording's
    done rows may not know some keys (None); latencies in seconds (None until known), the
    output tokens, the phase of a running request and why one waits (keys in column
    order, then those)."""

    num_draft_tokens: int | None
    """None in a recording's done rows (not recorded per request)."""
    num_accepted_tokens: int | None
    """None in a recording's done rows (not recorded per request)."""
    placeholders: int | None
    """None in a recording's done rows (not recorded per request)."""
    ttft: float | None
    itl: float | None
    e2e: float | None
    """Arrival to finish, once finished."""
    num_output_tokens: int
    phase: str | None
    """prefill | decode, while running."""
    waiting_text: str | None
    """Why it waits, in words."""


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


class ConfigMark(TypedDict):
    """A config change as a snapshot lists it."""

    step: int
    changes: Knobs
    version: int


class Quantiles(TypedDict):
    p50: float | None
    p95: float | None
    p99: float | None


class LatencySummary(TypedDict):
    """A session's latency quantiles (seconds, the latest samples) and totals."""

    ttft: Quantiles
    itl: Quantiles
    queue: Quantiles
    e2e: Quantiles
    finished: int
    throughput_tok_s: float
    preemptions: int
    kv_peak: int
    steps: int


class ReplayStatus(TypedDict):
    """Where a recording's replay stands (a replay socket's snapshots carry it)."""

    steps: int
    step: int
    playing: bool
    speed: float


class SnapshotHead(TypedDict):
    """A snapshot's scalars, as the fold has them (copies: the snapshot keeps them)."""

    session: str
    meta: dict[str, Any]
    seq: int
    step: int
    t: float
    config: Knobs
    config_version: int
    config_marks: list[ConfigMark]
    paused: bool
    simulated: bool


class _SnapshotBase(SnapshotHead):
    requests: Any
    """list[RequestRow], or `{"columns": ROW_COLUMNS, "rows": [[...], ...]}`."""
    history: list[StepSummary]
    totals: dict[str, int]
    waiting_detail: WaitingDetail


class LeftOut(TypedDict):
    """What a snapshot left out (a compact one, or rows past the state's bound): the
    recording has them."""

    requests: int
    """Request rows not in `requests`."""
    steps: int
    """Steps of history before `from_step` not in `history` (a compact snapshot's)."""
    from_step: int
    """The first step its history holds."""


class SnapshotData(_SnapshotBase, total=False):
    """A `snapshot` frame's data: a session's state for a viewer that joins late."""

    blocks: list[BlockChange]
    replay: ReplayStatus
    left_out: LeftOut


ROW_COLUMNS: tuple[str, ...] = tuple(RequestRow.__annotations__)
"""A request row's keys, in the order of a columns snapshot (segments last)."""
