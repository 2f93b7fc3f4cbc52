"""The versioned wire format (docs/protocol.md): pydantic models that validate frames
(ingest, import, tests). app.frames.convert builds them from engine events.

The shapes are protocol.wire's (the TypedDicts every producer builds and every reader
reads) with the bounds a recording needs; the codes are protocol.codes' enums.
tests/protocol/test_wire_models.py proves the field trees equal."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from protocol.codes import BlockState, FrameType, Phase, RequestMark, WaitingReason
from protocol.wire import Knobs

__all__ = ["FrameType"]

INT32_MAX = 2**31 - 1
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
"""Every count, step and id number: what an INTEGER column holds on every backend."""
NO_NUL = r"^[^\x00]*$"
"""Text a database column holds on every backend (PostgreSQL refuses NUL)."""
Name = Annotated[str, Field(max_length=256, pattern=NO_NUL)]


# ---------------------------------------------------------------- wire models
class _Strict(BaseModel):
    # No NaN or Infinity: they are not JSON, and a browser's JSON.parse rejects them.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ScheduledItem(_Strict):
    req: Name
    n: Annotated[int, Field(gt=0, le=INT32_MAX)]
    start: Count
    phase: Phase
    prefix_hit: Count
    sample: bool
    spec: int = Field(default=0, ge=0, le=64)
    """Draft tokens among the n (speculative decoding)."""
    pad: Count = 0
    """Static batching: pad positions computed beside this prompt."""


class PreemptedItem(_Strict):
    req: Name
    reason: Name
    tokens_lost: Count


class ReqReason(_Strict):
    req: Name
    reason: Annotated[str, Field(max_length=2000, pattern=NO_NUL)]


class Queues(_Strict):
    running: Count
    waiting: Count
    running_end: Count
    waiting_end: Count


class Budget(_Strict):
    max_tokens: Count
    used: Count
    max_seqs: Count
    prefill: Count
    decode: Count


class KVFrame(_Strict):
    total: Count
    used: Count
    cached_free: Count
    hit_tokens: Count
    used_end: Count
    prefix_queries: Count | None = None
    prefix_hits: Count | None = None


class IterationFrame(_Strict):
    step: Count
    t_start: float
    duration: float = Field(ge=0)
    forward_ms: float = Field(ge=0)
    overhead_us: float = Field(ge=0)
    simulated: bool
    scheduled: list[ScheduledItem]
    new: list[Name]
    resumed: list[Name]
    preempted: list[PreemptedItem]
    finished: list[ReqReason]
    arrived: list[Name]
    rejected: list[ReqReason]
    sampled: list[Name]
    queues: Queues
    budget: Budget
    kv: KVFrame
    blocks: list[tuple[Count, BlockState, Name | None, Count]]
    waiting_reasons: dict[Name, Annotated[str, Field(max_length=2000, pattern=NO_NUL)]]
    config_version: Count
    updated_step: Count | None = None
    waiting_default: WaitingReason | None = None
    """Every waiting request not in `waiting_reasons` has this reason (a known code)."""
    accepted: dict[Name, Count] = Field(default_factory=dict)
    appended: dict[Name, Count] = Field(default_factory=dict)
    placeholders: dict[Name, Count] = Field(default_factory=dict)
    spec_tokens: Count = 0
    padding: Count = 0
    waiting_detail: dict[
        Name, Annotated[str, Field(max_length=2000, pattern=NO_NUL)] | int | float | bool | None
    ] = Field(default_factory=dict)


class RequestDetail(BaseModel):
    """What a request mark may carry; the numbers the recording stores are typed."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    num_prompt_tokens: Count | None = None
    max_tokens: Count | None = None
    priority: Annotated[int, Field(ge=-INT32_MAX, le=INT32_MAX)] | None = None
    num_output_tokens: Count | None = None
    num_cached_tokens: Count | None = None
    reason: Annotated[str, Field(max_length=2000, pattern=NO_NUL)] | None = None
    prompt_token_ids: list[Count] | None = None
    prompt_block_hashes: (
        list[Annotated[str, Field(min_length=16, max_length=16, pattern=r"^[0-9a-f]{16}$")]] | None
    ) = None
    prompt_block_tokens: Annotated[int, Field(ge=1, le=1 << 20)] | None = None


class RequestFrame(_Strict):
    req: Name
    kind: RequestMark
    step: Count
    t: float
    detail: RequestDetail = Field(default_factory=lambda: RequestDetail())


class ConfigFrame(_Strict):
    step: Count
    config_version: Count
    changes: Knobs
    config: Knobs


class SessionFrame(BaseModel):
    """A `session` mark (opened, closed, state, gap...): the fields the recording and the
    fold read are typed; others pass through."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    event: Annotated[str, Field(min_length=1, max_length=32, pattern=NO_NUL)]
    name: Annotated[str, Field(max_length=200, pattern=NO_NUL)] | None = None
    source: Annotated[str, Field(max_length=64, pattern=NO_NUL)] | None = None
    runner: Annotated[str, Field(max_length=32, pattern=NO_NUL)] | None = None
    model: Annotated[str, Field(max_length=300, pattern=NO_NUL)] | None = None
    device: Annotated[str, Field(max_length=32, pattern=NO_NUL)] | None = None
    simulated: bool | None = None
    paused: bool | None = None
    config: Knobs | None = None
    describe: dict[str, Any] | None = None
    started_at: Annotated[float, Field(ge=0, le=1e11)] | None = None


class Envelope(BaseModel):
    """What protocol.envelope.envelope() writes (checked by the protocol tests)."""

    v: Literal[1] = 1
    type: FrameType
    session: str = Field(max_length=128)
    seq: int = Field(ge=1)
    ts: float | None = None
    """Wall-clock time the dashboard published the frame (for delivery latency)."""
    data: dict[str, Any]


FRAME_MODELS: dict[str, type[BaseModel]] = {
    FrameType.ITERATION: IterationFrame,
    FrameType.REQUEST: RequestFrame,
    FrameType.CONFIG: ConfigFrame,
    FrameType.SESSION: SessionFrame,
}


def validate_frame(frame_type: str, data: Any) -> dict[str, Any]:
    """Validate frame data against its model; raises pydantic.ValidationError."""
    model = FRAME_MODELS.get(frame_type)
    if model is None:
        raise ValueError(f"unknown frame type {frame_type!r}")
    if not isinstance(data, dict):
        raise ValueError("data: must be an object")
    # Absent optional fields stay absent (a `state` mark must not blank the name).
    out = model.model_validate(data).model_dump(mode="json", exclude_unset=True)
    if model is RequestFrame:
        out.setdefault("detail", {})
    return out
