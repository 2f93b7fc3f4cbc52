"""The versioned wire format (docs/protocol.md): pydantic models that validate frames
(ingest, import, tests). app.protocol.convert builds them from engine events."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FrameType = Literal["iteration", "request", "config", "snapshot", "gap", "session"]


# ---------------------------------------------------------------- wire models
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScheduledItem(_Strict):
    req: str = Field(max_length=256)
    n: int = Field(gt=0)
    start: int = Field(ge=0)
    phase: Literal["prefill", "decode"]
    prefix_hit: int = Field(ge=0)
    sample: bool
    spec: int = Field(default=0, ge=0, le=64)
    """Draft tokens among the n (speculative decoding)."""
    pad: int = Field(default=0, ge=0)
    """Static batching: pad positions computed beside this prompt."""


class PreemptedItem(_Strict):
    req: str
    reason: str
    tokens_lost: int = Field(ge=0)


class ReqReason(_Strict):
    req: str
    reason: str


class Queues(_Strict):
    running: int = Field(ge=0)
    waiting: int = Field(ge=0)
    running_end: int = Field(ge=0)
    waiting_end: int = Field(ge=0)


class Budget(_Strict):
    max_tokens: int = Field(ge=0)
    used: int = Field(ge=0)
    max_seqs: int = Field(ge=0)
    prefill: int = Field(ge=0)
    decode: int = Field(ge=0)


class KVFrame(_Strict):
    total: int = Field(ge=0)
    used: int = Field(ge=0)
    cached_free: int = Field(ge=0)
    hit_tokens: int = Field(ge=0)
    used_end: int = Field(ge=0)


class IterationFrame(_Strict):
    step: int = Field(ge=0)
    t_start: float
    duration: float = Field(ge=0)
    forward_ms: float = Field(ge=0)
    overhead_us: float = Field(ge=0)
    simulated: bool
    scheduled: list[ScheduledItem]
    new: list[str]
    resumed: list[str]
    preempted: list[PreemptedItem]
    finished: list[ReqReason]
    arrived: list[str]
    rejected: list[ReqReason]
    sampled: list[str]
    queues: Queues
    budget: Budget
    kv: KVFrame
    blocks: list[
        tuple[int, Literal["free", "cached", "used", "shared", "withheld"], str | None, int]
    ]
    waiting_reasons: dict[str, str]
    config_version: int = Field(ge=0)
    updated_step: int | None = Field(default=None, ge=0)
    accepted: dict[str, int] = Field(default_factory=dict)
    appended: dict[str, int] = Field(default_factory=dict)
    placeholders: dict[str, int] = Field(default_factory=dict)
    spec_tokens: int = Field(default=0, ge=0)
    padding: int = Field(default=0, ge=0)
    waiting_detail: dict[str, str | int | float | bool | None] = Field(default_factory=dict)


class RequestFrame(_Strict):
    req: str = Field(max_length=256)
    kind: Literal[
        "arrived",
        "rejected",
        "scheduled",
        "first_token",
        "preempted",
        "resumed",
        "finished",
        "aborted",
    ]
    step: int = Field(ge=0)
    t: float
    detail: dict[str, Any] = Field(default_factory=dict)


class ConfigFrame(_Strict):
    step: int = Field(ge=0)
    config_version: int = Field(ge=0)
    changes: dict[str, Any]
    config: dict[str, Any]


class Envelope(BaseModel):
    """What app.protocol.envelope.envelope() writes (checked by the protocol tests)."""

    v: Literal[1] = 1
    type: FrameType
    session: str = Field(max_length=128)
    seq: int = Field(ge=1)
    ts: float | None = None
    """Wall-clock time the dashboard published the frame (for delivery latency)."""
    data: dict[str, Any]


FRAME_MODELS: dict[str, type[BaseModel]] = {
    "iteration": IterationFrame,
    "request": RequestFrame,
    "config": ConfigFrame,
}


def validate_frame(frame_type: str, data: Any) -> dict[str, Any]:
    """Validate frame data against its model; raises pydantic.ValidationError."""
    model = FRAME_MODELS.get(frame_type)
    if model is None:
        raise ValueError(f"unknown frame type {frame_type!r}")
    return model.model_validate(data).model_dump(mode="json", exclude_unset=True)
