"""The parts of a request's life (GET /api/requests/{req}) as the fold builds them, typed:
the API answers and documents these very shapes (app.api_shapes). `from` is a Python
keyword: those types use the functional TypedDict syntax."""

from __future__ import annotations

from typing import Any, TypedDict

from protocol.wire import BlockChange, WaitingDetail


class ScheduledStep(TypedDict):
    step: int
    n: int
    """Tokens scheduled (drafts included)."""
    start: int
    """num_computed_tokens before."""
    phase: str
    prefix_hit: int
    """Prefix-cache hit tokens credited at this admission."""
    sample: bool
    spec: int
    """Draft tokens among the n."""
    accepted: int | None
    """Drafts accepted when they were verified."""
    pad: int


_WaitSpanBase = TypedDict(
    "_WaitSpanBase",
    {"from": int, "to": int, "reason": str, "text": str, "detail": WaitingDetail},
)


class WaitSpan(_WaitSpanBase):
    """Consecutive steps waited for one reason; merged spans say how the words varied."""

    last_text: str | None
    """Merged spans: the last step's words."""
    variants: int | None
    """Merged spans: how many wordings."""


class _PreemptionBase(TypedDict):
    step: int
    reason: str | None
    tokens_lost: int
    blocks_freed: int
    blocks_taken_by: list[str]
    """Who got its blocks in the same step."""


class Preemption(_PreemptionBase, total=False):
    """Filled in once the whole life is read (LifeFold._recompute)."""

    resumed_step: int | None
    recomputed_tokens: int
    resume_prefix_hit: int
    recompute_steps: list[int] | None
    """[first, last] recomputing."""


class Output(TypedDict):
    step: int
    """The step whose update appended them."""
    batch: int | None
    """The step whose batch they came from."""
    n: int
    t: float


HeldBlock = TypedDict(
    "HeldBlock",
    {
        "block": int,
        "from": int,
        "to": int | None,
        "own": bool,
        "owner": str | None,
        "max_ref": int,
        "shared_with": list[str],
        "inferred": bool,
    },
)


class Mark(TypedDict):
    """A request mark as the life lists it (its text and token ids moved to `text`)."""

    kind: str
    step: int
    t: float
    detail: dict[str, Any]


class BlockMapData(TypedDict):
    """A recording's KV block map after a step (GET /api/sessions/{id}/blocks)."""

    session: str
    step: int
    blocks: list[BlockChange]


class Finish(TypedDict):
    step: int
    reason: str
    t: float


class LifeParts(TypedDict):
    scheduled: list[ScheduledStep]
    waits: list[WaitSpan]
    preemptions: list[Preemption]
    outputs: list[Output]
    placeholders: list[list[int]]
    blocks: list[HeldBlock]
    marks: list[Mark]
    text: dict[str, Any]


class _RequestLifeBase(LifeParts):
    session: str
    req: str
    upto_step: int
    status: str
    request: dict[str, Any]
    modes: dict[str, Any]
    latency: Latency
    frames: dict[str, int]
    elapsed_ms: float


class RequestLifeData(_RequestLifeBase, total=False):
    """GET /api/requests/{req}: one request's whole life, read from the recording."""

    cached: bool


class Latency(TypedDict):
    ttft: float | None
    queue: float | None
    e2e: float | None
    itl_mean: float | None
    itl_max: float | None
    itl: list[float]
