"""The HTTP API's answers comparing two recordings (/api/compare, /api/compare/first-
difference): app.records.compare_types as pydantic models, for the schema and the docs
(tests/protocol/test_wire_models.py proves the field trees equal)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from protocol.wire import Knobs


class SessionSummary(BaseModel):
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


class SetupRow(BaseModel):
    key: str = Field(description="source, runner, model, device, release, clock, workload, knobs")
    label: str
    a: str
    b: str
    differs: bool


class SetupData(BaseModel):
    rows: list[SetupRow]
    like_for_like: bool = Field(description="nothing but knobs differs")
    verdict: str = Field(description="in words: like for like, or what else differs")
    notes: list[str] = Field(description="how a re-run's clock makes it differ, per side")


class Comparison(BaseModel):
    a: SessionSummary
    b: SessionSummary
    diff: dict[str, float | None] = Field(description="B - A of every number")
    setup: SetupData = Field(description="every difference between the two setups")


class Side(BaseModel):
    session: str
    name: str
    vllm_version: str | None


class StepLine(BaseModel):
    """One side's step around the first difference (only `step`, null, once it ended)."""

    step: int | None
    plan: str | None = Field(None, description="{req:n, ...}")
    tokens: int | None = None
    preempted: list[str] | None = None
    finished: list[str] | None = None
    running: int | None = None
    waiting: int | None = None
    kv_used: int | None = None


class ReleaseChange(BaseModel):
    flag: str
    since: str
    kind: str
    summary: str
    source: str
    explains: bool | None = Field(
        description="reverting it alone removes the difference at that step (null: not tried)"
    )


class FirstDifference(BaseModel):
    a: Side
    b: Side
    step: int | None = Field(description="the first step whose plans differ; null: none")
    fields: list[str] = Field(description="what differs at that step")
    compared: int = Field(description="steps found alike before it (the walk stops at 200,000)")
    rows: dict[str, list[StepLine]] = Field(description="each side's steps around it")
    changes: list[ReleaseChange] = Field(
        description="release changes between the two (engine.releases CHANGES)"
    )
    explained_by: list[str]
    explain_note: str = Field(description="why the changes were not tried, if they were not")
