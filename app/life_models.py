"""Response models of request forensics (GET /api/requests/{req}, app.records.request_life)
and of a recording's block map at a step: what /docs shows and the answers are checked
against. The fold builds the same shapes typed (app.records.life_types; a test proves the
fields equal)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ScheduledStep(BaseModel):
    step: int
    n: int = Field(description="tokens scheduled (drafts included)")
    start: int = Field(description="num_computed_tokens before")
    phase: str
    prefix_hit: int = Field(description="prefix-cache hit tokens credited at this admission")
    sample: bool
    spec: int = Field(description="draft tokens among the n")
    accepted: int | None = Field(description="drafts accepted when they were verified")
    pad: int


class WaitSpan(BaseModel):
    model_config = ConfigDict(extra="allow")
    from_: int = Field(alias="from")
    to: int
    reason: str
    text: str = Field(description="the reason in words, with the step's numbers")
    detail: dict[str, str | int | float | bool | None] = Field(
        description="the step's waiting numbers (protocol.wire.WaitingDetail)"
    )
    last_text: str | None = Field(None, description="merged spans: the last step's words")
    variants: int | None = Field(None, description="merged spans: how many wordings")


class Preemption(BaseModel):
    model_config = ConfigDict(extra="allow")
    step: int
    reason: str | None
    tokens_lost: int
    blocks_freed: int
    blocks_taken_by: list[str] = Field(description="who got its blocks in the same step")
    resumed_step: int | None
    recomputed_tokens: int
    resume_prefix_hit: int | None = None
    recompute_steps: list[int] | None = Field(None, description="[first, last] recomputing")


class Output(BaseModel):
    step: int = Field(description="the step whose update appended them")
    batch: int | None = Field(description="the step whose batch they came from")
    n: int
    t: float


class HeldBlock(BaseModel):
    block: int
    from_: int = Field(alias="from")
    to: int | None = Field(description="None: still held")
    own: bool = Field(description="allocated by it (else a prefix-cache hit)")
    owner: str | None
    max_ref: int
    shared_with: list[str]
    inferred: bool


class Latency(BaseModel):
    ttft: float | None
    queue: float | None
    e2e: float | None
    itl_mean: float | None
    itl_max: float | None
    itl: list[float]


class RequestLife(BaseModel):
    """One request's whole life, read from the recording."""

    model_config = ConfigDict(extra="allow")
    session: str
    req: str
    upto_step: int
    status: str
    request: dict[str, Any]
    modes: dict[str, Any]
    latency: Latency
    scheduled: list[ScheduledStep]
    waits: list[WaitSpan]
    preemptions: list[Preemption]
    outputs: list[Output]
    placeholders: list[list[int]] = Field(description="[step, num_output_placeholders]")
    blocks: list[HeldBlock]
    marks: list[dict[str, Any]]
    text: dict[str, Any] = Field(description="prompt/output text or token ids")
    frames: dict[str, int]
    elapsed_ms: float


class BlockMap(BaseModel):
    session: str
    step: int
    blocks: list[list[Any]] = Field(description="[block_id, state, owner, ref_cnt]")
