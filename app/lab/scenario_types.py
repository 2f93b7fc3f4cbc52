"""A sweep's base scenario (engine/scenario.py's format, plus `workload` or `trace` for
a generated or traced one) and its source, typed: what app.lab.sources builds, a
SweepSpec carries and the lab's table stores."""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict

from protocol.wire import Knobs


class ScenarioRequest(TypedDict, total=False):
    """One request of a scenario's `requests` (engine.scenario parses and bounds it)."""

    id: str
    arrival_step: int
    arrival_time_ms: float
    prompt_token_ids: list[int]
    trace_prompt: dict[str, Any]
    """A trace's prompt by its block chain (engine.trace_prompt.TracePrompt.as_dict)."""
    prompt_len: int
    max_tokens: int
    priority: int
    temperature: float
    top_p: float
    seed: int


class WorkloadSpec(TypedDict, total=False):
    """A generated workload (engine.sweep.workload_requests): `poisson` or `bursty`."""

    kind: str
    seed: int
    rate: float
    num_requests: int
    prompt_len_mean: int
    max_tokens_mean: int
    burst: int


class TraceSource(TypedDict):
    """A Mooncake trace's rows (engine.sweep.trace_source): prompts built per point."""

    block_tokens: int
    rows: list[list[object]]
    """`[timestamp_ms, input_length, output_length, hash_ids]`."""


class BaseScenario(TypedDict, total=False):
    name: str
    description: str
    config: Knobs
    requests: list[ScenarioRequest]
    workload: WorkloadSpec
    trace: TraceSource


class SweepSource(TypedDict):
    """For people: where a sweep's workload came from."""

    kind: str
    """scenario, library, session, workload, trace or experiment."""
    label: str
