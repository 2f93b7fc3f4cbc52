"""Scenario files: a config and a list of timed arrivals (see docs/scenarios.md).

Every error names the field that is wrong, e.g. `requests[3].prompt_len: must be > 0`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config import (
    BatchingMode,
    CacheConfig,
    ConfigError,
    EngineConfig,
    SchedulerConfig,
    SchedulingPolicy,
)
from engine.releases import DEFAULT_VLLM_VERSION
from engine.request import SamplingParams
from engine.trace_prompt import TracePrompt

DEFAULT_MAX_STEPS = 100_000

_INT_KNOBS = {
    "max_num_batched_tokens": "scheduler",
    "max_num_seqs": "scheduler",
    "max_model_len": "scheduler",
    "long_prefill_token_threshold": "scheduler",
    "num_speculative_tokens": "scheduler",
    "prompt_lookup_max": "scheduler",
    "prompt_lookup_min": "scheduler",
    "max_num_active_seqs": "scheduler",
    "prefill_schedule_interval": "scheduler",
    "cache_aware_admission_window": "scheduler",
    "block_size": "cache",
    "num_gpu_blocks": "cache",
    "kv_block_limit": "cache",
}
_BOOL_KNOBS = {
    "enable_chunked_prefill": "scheduler",
    "scheduler_reserve_full_isl": "scheduler",
    "async_scheduling": "scheduler",
    "long_prefill_token_threshold_adaptive": "scheduler",
    "enable_prefix_caching": "cache",
}
_ZERO_OK = {
    "long_prefill_token_threshold",
    "num_speculative_tokens",
    "kv_block_limit",
    "max_num_active_seqs",
    "cache_aware_admission_window",
}
_REQUEST_KEYS = {
    "id",
    "arrival_step",
    "arrival_time_ms",
    "prompt_len",
    "prompt_token_ids",
    "trace_prompt",
    "max_tokens",
    "priority",
    "temperature",
    "top_p",
    "seed",
}


class ScenarioError(ValueError):
    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


@dataclass(frozen=True, slots=True)
class ScenarioRequest:
    id: str
    arrival_step: int
    prompt_token_ids: Sequence[int]
    """A tuple of token ids, or a trace's lazy prompt (engine.trace_prompt.TracePrompt)."""
    sampling_params: SamplingParams
    priority: int = 0
    arrival_time_ms: float | None = None
    """Arrive by the runner's clock instead (the sum of step times): the request is added
    before the first step that starts at or after this time."""


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    config: EngineConfig
    max_steps: int
    requests: tuple[ScenarioRequest, ...]


def prompt_tokens(index: int, prompt_len: int) -> list[int]:
    """The deterministic prompt of the request at list index `index`."""
    return [20000 + index] + [100 + (37 * j + index) % 9000 for j in range(1, prompt_len)]


def load_scenario(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """The scenario in the JSON file at `path`; `overrides`: knobs by name that replace the
    file's (as `batchscope simulate --vllm-version` gives them) before it is validated, so
    the config is checked once, as the release it will run as."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(str(path), f"cannot read file ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(str(path), f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return parse_scenario(data, overrides)


def parse_scenario(data: Any, overrides: Mapping[str, Any] | None = None) -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError("scenario", "must be a JSON object with 'config' and 'requests'")
    unknown = set(data) - {"name", "description", "config", "requests"}
    if unknown:
        raise ScenarioError(sorted(unknown)[0], "unknown top-level key")
    raw_config = data.get("config", {})
    if overrides and isinstance(raw_config, dict):
        raw_config = {**raw_config, **overrides}
    config, max_steps = _parse_config(raw_config)
    raw_requests = data.get("requests")
    if not isinstance(raw_requests, list):
        raise ScenarioError("requests", "must be a list")
    requests = tuple(_parse_request(i, r) for i, r in enumerate(raw_requests))
    seen: set[str] = set()
    for i, req in enumerate(requests):
        if req.id in seen:
            raise ScenarioError(f"requests[{i}].id", f"duplicate id {req.id!r}")
        seen.add(req.id)
    return Scenario(
        name=str(data.get("name", "")),
        description=str(data.get("description", "")),
        config=config,
        max_steps=max_steps,
        requests=requests,
    )


def _parse_config(raw: Any) -> tuple[EngineConfig, int]:
    if not isinstance(raw, dict):
        raise ScenarioError("config", "must be an object")
    sched: dict[str, Any] = {}
    cache: dict[str, Any] = {}
    max_steps = DEFAULT_MAX_STEPS
    version = DEFAULT_VLLM_VERSION
    for key, value in raw.items():
        where = f"config.{key}"
        if key in _INT_KNOBS:
            minimum = 0 if key in _ZERO_OK else 1
            (sched if _INT_KNOBS[key] == "scheduler" else cache)[key] = _int(where, value, minimum)
        elif key in _BOOL_KNOBS:
            if not isinstance(value, bool):
                raise ScenarioError(where, "must be true or false")
            (sched if _BOOL_KNOBS[key] == "scheduler" else cache)[key] = value
        elif key == "batching":
            try:
                sched["batching"] = BatchingMode(value)
            except ValueError:
                raise ScenarioError(where, "must be 'continuous' or 'static'") from None
        elif key == "policy":
            try:
                sched["policy"] = SchedulingPolicy(value)
            except ValueError:
                raise ScenarioError(where, "must be 'fcfs' or 'priority'") from None
        elif key == "watermark":
            sched["watermark"] = _number(where, value, 0.0, 1.0)
        elif key == "cache_aware_admission_threshold":
            sched[key] = _number(where, value, 0.0, 1.0)
        elif key == "vllm_version":
            if not isinstance(value, str):
                raise ScenarioError(where, 'must be a string such as "0.20" or "0.33"')
            version = value
        elif key == "max_steps":
            max_steps = _int(where, value, 1)
        else:
            raise ScenarioError(where, "unknown config key")
    config = EngineConfig(
        scheduler=SchedulerConfig(**sched), cache=CacheConfig(**cache), vllm_version=version
    )
    try:
        config.validate()
    except ConfigError as exc:
        raise ScenarioError(f"config.{exc.field}", exc.message) from None
    return config, max_steps


def _parse_request(index: int, raw: Any) -> ScenarioRequest:
    where = f"requests[{index}]"
    if not isinstance(raw, dict):
        raise ScenarioError(where, "must be an object")
    unknown = set(raw) - _REQUEST_KEYS
    if unknown:
        raise ScenarioError(f"{where}.{sorted(unknown)[0]}", "unknown request key")
    req_id = raw.get("id")
    if not isinstance(req_id, str) or not req_id:
        raise ScenarioError(f"{where}.id", "must be a non-empty string")
    arrival = _int(f"{where}.arrival_step", raw.get("arrival_step", 0), 0)
    arrival_ms = None
    if "arrival_time_ms" in raw:
        if "arrival_step" in raw:
            raise ScenarioError(f"{where}.arrival_time_ms", "give arrival_step or this, not both")
        arrival_ms = _number(f"{where}.arrival_time_ms", raw["arrival_time_ms"], 0.0, 1e12)
    tokens: Sequence[int]
    if "trace_prompt" in raw:
        tokens = _trace_prompt(f"{where}.trace_prompt", raw["trace_prompt"])
    elif "prompt_token_ids" in raw:
        ids = raw["prompt_token_ids"]
        if not isinstance(ids, list) or not ids:
            raise ScenarioError(f"{where}.prompt_token_ids", "must be a non-empty list")
        for j, tok in enumerate(ids):
            _int(f"{where}.prompt_token_ids[{j}]", tok, 0)
        tokens = tuple(ids)
    elif "prompt_len" in raw:
        tokens = tuple(prompt_tokens(index, _int(f"{where}.prompt_len", raw["prompt_len"], 1)))
    else:
        raise ScenarioError(
            f"{where}.prompt_len", "required (or give prompt_token_ids or trace_prompt)"
        )
    max_tokens = _int(f"{where}.max_tokens", raw.get("max_tokens"), 1)
    priority = raw.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ScenarioError(f"{where}.priority", "must be an integer")
    temperature = _number(f"{where}.temperature", raw.get("temperature", 0.0), 0.0, 100.0)
    top_p = _number(f"{where}.top_p", raw.get("top_p", 1.0), 1e-9, 1.0)
    seed = raw.get("seed")
    if seed is not None:
        seed = _int(f"{where}.seed", seed, 0)
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed)
    return ScenarioRequest(req_id, arrival, tokens, params, priority, arrival_ms)


def _trace_prompt(where: str, raw: Any) -> TracePrompt:
    """`{hash_ids, input_length, block_tokens, index}`: a trace's prompt by its block chain
    (import-trace's compact form; engine.trace_prompt)."""
    if not isinstance(raw, dict):
        raise ScenarioError(
            where, "must be an object {hash_ids, input_length, block_tokens, index}"
        )
    unknown = set(raw) - {"hash_ids", "input_length", "block_tokens", "index"}
    if unknown:
        raise ScenarioError(f"{where}.{sorted(unknown)[0]}", "unknown key")
    length = _int(f"{where}.input_length", raw.get("input_length"), 1)
    block_tokens = _int(f"{where}.block_tokens", raw.get("block_tokens"), 1)
    index = _int(f"{where}.index", raw.get("index"), 0)
    ids = raw.get("hash_ids")
    if not isinstance(ids, list):
        raise ScenarioError(f"{where}.hash_ids", "must be a list of integers >= 0")
    for j, h in enumerate(ids):
        _int(f"{where}.hash_ids[{j}]", h, 0)
    if len(ids) > -(-length // block_tokens):
        raise ScenarioError(
            f"{where}.hash_ids",
            f"{len(ids)} ids, but input_length {length} is only "
            f"{-(-length // block_tokens)} block(s) of {block_tokens} tokens",
        )
    return TracePrompt(ids, length, block_tokens, index)


def _int(where: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScenarioError(where, "must be an integer" if value is not None else "required")
    if value < minimum:
        raise ScenarioError(where, f"must be > {minimum - 1}" if minimum else "must be >= 0")
    return value


def _number(where: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScenarioError(where, "must be a number")
    if not low <= value <= high:
        raise ScenarioError(where, f"must be between {low:g} and {high:g}")
    return float(value)
