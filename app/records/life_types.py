"""The parts of a request's life (GET /api/requests/{req}) as the fold builds them, typed:
app.life_models validates the same shapes for the API (tests/protocol/test_wire_models.py
proves the field trees equal). `from` is a Python keyword: those types use the functional
TypedDict syntax."""

from __future__ import annotations

from typing import Any, TypedDict

from protocol.wire import BlockChange, WaitingDetail


class ScheduledStep(TypedDict):
    step: int
    n: int
    start: int
    phase: str
    prefix_hit: int
    sample: bool
    spec: int
    accepted: int | None
    pad: int


_WaitSpanBase = TypedDict(
    "_WaitSpanBase",
    {"from": int, "to": int, "reason": str, "text": str, "detail": WaitingDetail},
)


class WaitSpan(_WaitSpanBase, total=False):
    """Consecutive steps waited for one reason; merged spans say how the words varied."""

    last_text: str
    variants: int


class _PreemptionBase(TypedDict):
    step: int
    reason: str | None
    tokens_lost: int
    blocks_freed: int
    blocks_taken_by: list[str]


class Preemption(_PreemptionBase, total=False):
    """Filled in once the whole life is read (LifeFold._recompute)."""

    resumed_step: int | None
    recomputed_tokens: int
    resume_prefix_hit: int
    recompute_steps: list[int] | None


class Output(TypedDict):
    step: int
    batch: int | None
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
    """A recording's KV block map after a step (app.life_models.BlockMap)."""

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
    """GET /api/requests/{req}: one request's whole life (app.life_models.RequestLife)."""

    cached: bool


class Latency(TypedDict):
    ttft: float | None
    queue: float | None
    e2e: float | None
    itl_mean: float | None
    itl_max: float | None
    itl: list[float]
