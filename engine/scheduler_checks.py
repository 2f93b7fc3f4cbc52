"""What the scheduler's config allows, checked before anything changes: a request that
could never run here is rejected before it is queued (with a reason, not queued forever),
and a knob change a running session cannot take is refused (engine.scheduler calls both).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from engine.config import ConfigError, EngineConfig
from engine.kv_cache_manager import cdiv

if TYPE_CHECKING:
    from engine.scheduler import Scheduler

FIXED_WHILE_RUNNING = (
    "max_model_len",
    "async_scheduling",
    "num_speculative_tokens",
    "prompt_lookup_max",
    "prompt_lookup_min",
    "batching",
)
"""Scheduler knobs that a running session cannot change (they shape its requests)."""


def rejection_reason(sched: Scheduler, num_prompt_tokens: int, max_tokens: int) -> str | None:
    """Why a request could never run here, or None."""
    if num_prompt_tokens <= 0:
        return "empty prompt"
    if num_prompt_tokens >= sched.max_model_len:
        return (
            f"prompt of {num_prompt_tokens} tokens needs max_model_len > {num_prompt_tokens} "
            f"(is {sched.max_model_len})"
        )
    peak = peak_tokens(sched, num_prompt_tokens, max_tokens)
    needed = cdiv(peak, sched.kv_cache_manager.block_size)
    usable = sched.kv_cache_manager.block_pool.num_usable_blocks
    if needed > usable:
        return (
            f"needs {needed} KV blocks at its peak ({peak} tokens) but the pool "
            f"has {usable} usable blocks: it could never finish"
        )
    return None


def peak_tokens(sched: Scheduler, num_prompt_tokens: int, max_tokens: int) -> int:
    """Slots a request holds at its last step: prompt + outputs - 1 tokens."""
    return num_prompt_tokens + min(max_tokens, sched.max_model_len - num_prompt_tokens) - 1


def check_config_change(sched: Scheduler, config: EngineConfig) -> None:
    """Raise (ValueError, ConfigError) if a running `sched` cannot take `config`."""
    config.validate()
    old = sched.config
    old_cache = old.cache
    if dataclasses.replace(config.cache, kv_block_limit=old_cache.kv_block_limit) != old_cache:
        raise ValueError("the KV pool (cache config) cannot change while running")
    if config.vllm_version != old.vllm_version:
        raise ValueError("vllm_version cannot change while running; start a new session")
    for name in FIXED_WHILE_RUNNING:
        if getattr(config.scheduler, name) != getattr(old.scheduler, name):
            raise ValueError(f"{name} cannot change while running; start a new session")
    if config.cache.kv_block_limit != old_cache.kv_block_limit:
        check_kv_block_limit(sched, config.cache.kv_block_limit or config.cache.num_usable_blocks)


def check_kv_block_limit(sched: Scheduler, limit: int) -> None:
    """Raise ConfigError if a request held could never finish in a pool of `limit`."""
    for request in sched.requests.values():
        peak = peak_tokens(sched, request.num_prompt_tokens, request.max_tokens)
        needed = cdiv(peak, sched.kv_cache_manager.block_size)
        if needed > limit:
            raise ConfigError(
                "kv_block_limit",
                f"request {request.request_id!r} needs {needed} blocks at its peak; "
                f"a pool of {limit} could never finish it",
            )
