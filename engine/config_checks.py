"""What the scheduler's config allows, from plain numbers: a request that could never run
is rejected before it is queued (with a reason, not queued forever), and a knob change a
running session cannot take is refused (the Scheduler calls both).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from engine.config import ConfigError, EngineConfig
from engine.kv_cache_manager import cdiv
from engine.request import Request

FIXED_WHILE_RUNNING = (
    "max_model_len",
    "async_scheduling",
    "num_speculative_tokens",
    "prompt_lookup_max",
    "prompt_lookup_min",
    "batching",
)
"""Scheduler knobs that a running session cannot change (they shape its requests)."""


def peak_tokens(num_prompt_tokens: int, max_tokens: int, max_model_len: int) -> int:
    """Slots a request holds at its last step: prompt + outputs - 1 tokens."""
    return num_prompt_tokens + min(max_tokens, max_model_len - num_prompt_tokens) - 1


def rejection_reason(
    num_prompt_tokens: int,
    max_tokens: int,
    max_model_len: int,
    block_size: int,
    num_usable_blocks: int,
) -> str | None:
    """Why a request could never run in a pool of `num_usable_blocks`, or None."""
    if num_prompt_tokens <= 0:
        return "empty prompt"
    if num_prompt_tokens >= max_model_len:
        return (
            f"prompt of {num_prompt_tokens} tokens needs max_model_len > {num_prompt_tokens} "
            f"(is {max_model_len})"
        )
    peak = peak_tokens(num_prompt_tokens, max_tokens, max_model_len)
    needed = cdiv(peak, block_size)
    if needed > num_usable_blocks:
        return (
            f"needs {needed} KV blocks at its peak ({peak} tokens) but the pool "
            f"has {num_usable_blocks} usable blocks: it could never finish"
        )
    return None


def check_config_change(old: EngineConfig, new: EngineConfig) -> None:
    """Raise (ValueError, ConfigError) if a session running `old` cannot take `new`
    (a new kv_block_limit is checked against the requests held: check_kv_block_limit)."""
    new.validate()
    old_cache = old.cache
    if dataclasses.replace(new.cache, kv_block_limit=old_cache.kv_block_limit) != old_cache:
        raise ValueError("the KV pool (cache config) cannot change while running")
    if new.vllm_version != old.vllm_version:
        raise ValueError("vllm_version cannot change while running; start a new session")
    for name in FIXED_WHILE_RUNNING:
        if getattr(new.scheduler, name) != getattr(old.scheduler, name):
            raise ValueError(f"{name} cannot change while running; start a new session")


def check_kv_block_limit(
    requests: Iterable[Request], limit: int, block_size: int, max_model_len: int
) -> None:
    """Raise ConfigError if a request held could never finish in a pool of `limit`."""
    for request in requests:
        peak = peak_tokens(request.num_prompt_tokens, request.max_tokens, max_model_len)
        needed = cdiv(peak, block_size)
        if needed > limit:
            raise ConfigError(
                "kv_block_limit",
                f"request {request.request_id!r} needs {needed} blocks at its peak; "
                f"a pool of {limit} could never finish it",
            )
