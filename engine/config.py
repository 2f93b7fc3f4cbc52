"""Engine configuration: frozen dataclasses validated the way vLLM validates them."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any

from engine.releases import (
    DEFAULT_VLLM_VERSION,
    KNOB_SINCE,
    knob_available,
    normalize_version,
    release_features,
)


class ConfigError(ValueError):
    """A knob value that vLLM would refuse. `field` names the offending knob."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


MAX_SPECULATIVE_TOKENS = 16
"""The most draft tokens per step a session may ask for."""


class BatchingMode(StrEnum):
    CONTINUOUS = "continuous"
    """vLLM: requests join and leave the running batch at every step."""
    STATIC = "static"
    """The pre-vLLM baseline: a batch is admitted only when the previous one has fully
    finished; prompts are padded to the batch's longest and finished rows idle."""


class SchedulingPolicy(StrEnum):
    FCFS = "fcfs"
    PRIORITY = "priority"


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """The scheduler's knobs, named as in vLLM's `SchedulerConfig`."""

    max_num_batched_tokens: int = 2048
    """Token budget: scheduled positions per step, over all requests."""
    max_num_seqs: int = 128
    """Sequence slots: the most requests in RUNNING at once."""
    max_model_len: int = 2048
    """Longest sequence (prompt + output) a request may reach."""
    long_prefill_token_threshold: int = 0
    """Per-request cap on tokens scheduled in one step (0 = no cap)."""
    enable_chunked_prefill: bool = True
    """If off, a waiting prompt must fit the remaining budget whole."""
    policy: SchedulingPolicy = SchedulingPolicy.FCFS
    scheduler_reserve_full_isl: bool = True
    """Admit a waiting request only if its whole current sequence fits the free KV blocks."""
    async_scheduling: bool = False
    """vLLM's AsyncScheduler behind EngineCore's batch queue of 2: batch N+1 is scheduled
    before batch N's output is applied (vLLM 0.20's default engine loop)."""
    num_speculative_tokens: int = 0
    """Draft tokens proposed per request per step by the n-gram drafter (0 = off)."""
    prompt_lookup_max: int = 5
    """Longest n-gram the prompt-lookup drafter matches (vLLM's `prompt_lookup_max`)."""
    prompt_lookup_min: int = 2
    """Shortest n-gram the prompt-lookup drafter matches (vLLM's `prompt_lookup_min`)."""
    batching: BatchingMode = BatchingMode.CONTINUOUS
    """`static` admits whole padded batches, for comparison with continuous batching."""
    # --- knobs of later vLLM releases (engine.releases: refused on releases without them)
    max_num_active_seqs: int = 0
    """Admission cap into RUNNING, below max_num_seqs (0 = max_num_seqs; vLLM's None)."""
    watermark: float = 0.0
    """Fraction of the KV pool kept free when admitting waiting/preempted requests."""
    prefill_schedule_interval: int = 1
    """Prefill only once every N executed steps while a decode runs (1 = every step)."""
    long_prefill_token_threshold_adaptive: bool = False
    """Floor long_prefill_token_threshold at max_num_batched_tokens // (running + waiting)."""
    cache_aware_admission_window: int = 0
    """Cache-aware admission: within the first N waiting requests, fresh ones with more of
    their prompt in the prefix cache are admitted first (0 = arrival order; FCFS with
    prefix caching only, as in vLLM)."""
    cache_aware_admission_threshold: float = 0.5
    """KV usage from which the cache-aware window applies."""

    def validate(self) -> None:
        self._validate_later_knobs()
        _positive("max_num_batched_tokens", self.max_num_batched_tokens)
        _positive("max_num_seqs", self.max_num_seqs)
        _positive("max_model_len", self.max_model_len)
        if self.long_prefill_token_threshold < 0:
            raise ConfigError("long_prefill_token_threshold", "must be >= 0 (0 = no cap)")
        if not 0 <= self.num_speculative_tokens <= MAX_SPECULATIVE_TOKENS:
            raise ConfigError(
                "num_speculative_tokens",
                f"must be between 0 (off) and {MAX_SPECULATIVE_TOKENS}",
            )
        if self.num_speculative_tokens and self.async_scheduling:
            # vLLM 0.20 runs the (CPU) n-gram drafter with sync scheduling only.
            raise ConfigError(
                "async_scheduling",
                "speculative decoding with the n-gram drafter runs with sync scheduling "
                "(as in vLLM 0.20); turn one of them off",
            )
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ConfigError(
                "prompt_lookup_min",
                "must be >= 1 and <= prompt_lookup_max",
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError(
                "max_num_batched_tokens",
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be greater "
                f"than or equal to max_num_seqs ({self.max_num_seqs})",
            )
        if self.batching is BatchingMode.STATIC and (
            self.async_scheduling or self.num_speculative_tokens
        ):
            raise ConfigError(
                "batching", "static batching runs the sync loop without speculative decoding"
            )
        if (
            not self.enable_chunked_prefill or self.batching is BatchingMode.STATIC
        ) and self.max_num_batched_tokens < self.max_model_len:
            raise ConfigError(
                "max_num_batched_tokens",
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller than "
                f"max_model_len ({self.max_model_len}) while prompts are not chunked (chunked "
                "prefill off, or static batching): "
                "long prompts could never be scheduled",
            )

    def _validate_later_knobs(self) -> None:
        if isinstance(self.max_num_active_seqs, bool) or not isinstance(
            self.max_num_active_seqs, int
        ):
            raise ConfigError("max_num_active_seqs", "must be an integer (0 = max_num_seqs)")
        if not 0 <= self.max_num_active_seqs <= self.max_num_seqs:
            raise ConfigError(
                "max_num_active_seqs",
                f"max_num_active_seqs ({self.max_num_active_seqs}) must be between 1 and "
                f"max_num_seqs ({self.max_num_seqs}) (0 = max_num_seqs)",
            )
        if isinstance(self.watermark, bool) or not isinstance(self.watermark, int | float):
            raise ConfigError("watermark", "must be a number")
        if not 0.0 <= self.watermark < 1.0:
            raise ConfigError("watermark", "must be >= 0.0 and < 1.0 (0.0 = off)")
        _positive("prefill_schedule_interval", self.prefill_schedule_interval)
        if not isinstance(self.long_prefill_token_threshold_adaptive, bool):
            raise ConfigError("long_prefill_token_threshold_adaptive", "must be true or false")
        window = self.cache_aware_admission_window
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise ConfigError("cache_aware_admission_window", "must be an integer >= 0 (0 = off)")
        level = self.cache_aware_admission_threshold
        if isinstance(level, bool) or not isinstance(level, int | float) or not 0 <= level <= 1:
            raise ConfigError("cache_aware_admission_threshold", "must be between 0.0 and 1.0")


LATER_KNOB_DEFAULTS: dict[str, Any] = {
    "max_num_active_seqs": 0,
    "watermark": 0.0,
    "prefill_schedule_interval": 1,
    "long_prefill_token_threshold_adaptive": False,
    "cache_aware_admission_window": 0,
    "cache_aware_admission_threshold": 0.5,
}
"""Knobs that only some releases have, with the value that means 'as before'."""


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """The paged KV pool. `num_gpu_blocks` includes vLLM's reserved null block."""

    block_size: int = 16
    num_gpu_blocks: int = 1024
    enable_prefix_caching: bool = True
    kv_block_limit: int = 0
    """Serve at most this many usable blocks (0 = all); the one cache knob that may
    change live, to provoke preemption."""

    def validate(self) -> None:
        _positive("block_size", self.block_size)
        if self.num_gpu_blocks < 2:
            raise ConfigError(
                "num_gpu_blocks", "must be >= 2 (one block is the reserved null block)"
            )
        if not 0 <= self.kv_block_limit <= self.num_gpu_blocks - 1:
            raise ConfigError(
                "kv_block_limit",
                f"must be between 1 and {self.num_gpu_blocks - 1} usable blocks (0 = no limit)",
            )

    @property
    def num_usable_blocks(self) -> int:
        return self.num_gpu_blocks - 1


@dataclass(frozen=True, slots=True)
class EngineConfig:
    scheduler: SchedulerConfig = dataclasses.field(default_factory=SchedulerConfig)
    cache: CacheConfig = dataclasses.field(default_factory=CacheConfig)
    vllm_version: str = DEFAULT_VLLM_VERSION
    """The vLLM release whose scheduling semantics the engine follows (engine.releases)."""

    def __post_init__(self) -> None:
        # '0.33.0' / 'v0.33' -> '0.33'; anything else is left for validate() to refuse.
        with contextlib.suppress(ValueError):
            object.__setattr__(self, "vllm_version", normalize_version(self.vllm_version))

    def validate(self) -> EngineConfig:
        try:
            version = normalize_version(self.vllm_version)
        except ValueError as exc:
            raise ConfigError("vllm_version", str(exc)) from None
        self.scheduler.validate()
        self.cache.validate()
        _validate_release(self.scheduler, version)
        return self

    def with_updates(self, **changes: Any) -> EngineConfig:
        """A copy with knobs changed by name (scheduler or cache), validated."""
        sched: dict[str, Any] = {}
        cache: dict[str, Any] = {}
        sched_fields = {f.name for f in dataclasses.fields(SchedulerConfig)}
        cache_fields = {f.name for f in dataclasses.fields(CacheConfig)}
        version = self.vllm_version
        for key, value in changes.items():
            if key == "vllm_version":
                version = value
            elif key in sched_fields:
                sched[key] = _ENUMS[key](value) if key in _ENUMS else value
            elif key in cache_fields:
                cache[key] = value
            else:
                raise ConfigError(key, "unknown knob")
        new = EngineConfig(
            scheduler=dataclasses.replace(self.scheduler, **sched),
            cache=dataclasses.replace(self.cache, **cache),
            vllm_version=version,
        )
        return new.validate()

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"vllm_version": self.vllm_version}
        for part in (self.scheduler, self.cache):
            for f in dataclasses.fields(part):
                value = getattr(part, f.name)
                out[f.name] = value.value if isinstance(value, Enum) else value
        return out


_ENUMS: dict[str, type[Enum]] = {"policy": SchedulingPolicy, "batching": BatchingMode}


def knobs_to_reset(config: EngineConfig, version: str) -> dict[str, Any]:
    """The later-release knobs `config` sets that vLLM `version` does not have, at the
    value that means 'as before': what a new session on `version` that only carries the
    old knobs over (does not ask for them) takes instead. {} for an unknown release."""
    try:
        version = normalize_version(version)
    except ValueError:
        return {}
    return {
        knob: default
        for knob, default in LATER_KNOB_DEFAULTS.items()
        if getattr(config.scheduler, knob) != default and not knob_available(knob, version)
    }


def _validate_release(sc: SchedulerConfig, version: str) -> None:
    """Knobs and combinations the chosen release does not have or refuses."""
    for knob, default in LATER_KNOB_DEFAULTS.items():
        if getattr(sc, knob) != default and not knob_available(knob, version):
            raise ConfigError(
                knob,
                f"vLLM {version} has no {knob} (added in {KNOB_SINCE[knob]}); choose a "
                f"later vllm_version or leave it at {default}",
            )
    features = release_features(version)
    threshold = sc.long_prefill_token_threshold
    if features.threshold_within_max_model_len and threshold > sc.max_model_len:
        raise ConfigError(
            "long_prefill_token_threshold",
            f"long_prefill_token_threshold ({threshold}) cannot be greater than "
            f"max_model_len ({sc.max_model_len}) (vLLM {version})",
        )


def _positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(name, "must be a positive integer")
