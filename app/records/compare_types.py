"""Two recordings compared, typed: each one's summary (app.records.compare) and where
their plans first part (app.records.first_difference). The HTTP API answers and
documents these very shapes (app.api_shapes)."""

from __future__ import annotations

from typing_extensions import TypedDict

from protocol.wire import Knobs


class SessionSummary(TypedDict):
    """A recording at its last step: latency quantiles (seconds) and totals."""

    session: str
    name: str
    steps: int
    finished: int
    throughput_tok_s: float
    ttft_p50: float | None
    ttft_p99: float | None
    itl_p50: float | None
    itl_p99: float | None
    e2e_p50: float | None
    e2e_p99: float | None
    preemptions: int
    kv_peak: int
    config: Knobs


class SetupRow(TypedDict):
    """One part of the two sessions' setups (runner, model, clock, ...) side by side."""

    key: str
    """source, runner, model, device, release, clock, workload, knobs"""
    label: str
    a: str
    b: str
    differs: bool


class SetupData(TypedDict):
    """Every difference between the two setups (app.records.compare_setup)."""

    rows: list[SetupRow]
    like_for_like: bool
    """Nothing but knobs differs."""
    verdict: str
    """In words: like for like, or what else differs."""
    notes: list[str]
    """How a re-run's clock makes it differ, per side."""


class ComparisonData(TypedDict):
    a: SessionSummary
    b: SessionSummary
    diff: dict[str, float | None]
    """B - A of every number of the summaries."""
    setup: SetupData
    """Every difference between the two setups."""


class StepSignature(TypedDict):
    """What a step decided (times, waiting reasons and block ids left out)."""

    scheduled: list[tuple[str, int, int, int]]
    """(req, n, start, prefix_hit) of each scheduled request."""
    new: list[str]
    resumed: list[str]
    preempted: list[str]
    finished: list[str]
    queues: tuple[int, int, int, int]
    kv_used: tuple[int, int]
    spec: int
    accepted: dict[str, int]


class _StepLineBase(TypedDict):
    step: int | None
    """None: that side had ended."""


class StepLine(_StepLineBase, total=False):
    """One side's step in the tables around the first difference."""

    plan: str
    """{req:n, ...}"""
    tokens: int
    preempted: list[str]
    finished: list[str]
    running: int
    waiting: int
    kv_used: int


class Side(TypedDict):
    session: str
    name: str
    vllm_version: str | None


class ReleaseChangeRow(TypedDict):
    flag: str
    since: str
    kind: str
    summary: str
    source: str
    explains: bool | None
    """Reverting it alone removes the difference (None: not tried)."""


class FirstDifferenceData(TypedDict):
    a: Side
    b: Side
    step: int | None
    """The first step whose plans differ; None: none."""
    fields: list[str]
    """What differs at that step."""
    compared: int
    """Steps found alike before it (the walk stops at 200,000)."""
    rows: dict[str, list[StepLine]]
    """Each side's steps around it."""
    changes: list[ReleaseChangeRow]
    """Release changes between the two (engine.releases CHANGES)."""
    explained_by: list[str]
    explain_note: str
    """Why the changes were not tried, if they were not."""
