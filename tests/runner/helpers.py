"""Builders for runner tests: hand-made SchedulerOutputs, a small model, device params."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
import torch

from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.outputs import ScheduledChunk, SchedulerOutput
from engine.reasons import NO_WAITING
from engine.request import SamplingParams
from engine.runner.model import ModelConfig
from engine.runner.torch_runner import TorchRunner

# CPU always; the same checks on CUDA under the `gpu` marker (skipped without CUDA).
DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
        ],
    ),
]

# 2 layers, hidden 64, 4 heads over 2 KV heads: fast on 2 CPU cores, still GQA.
SMALL = ModelConfig("small", 512, 64, 128, 2, 4, 2, 16, rms_norm_eps=1e-6, rope_theta=5000.0)


def engine_config(
    num_gpu_blocks: int = 64, block_size: int = 4, max_model_len: int = 256, **sched: int
) -> EngineConfig:
    return EngineConfig(
        scheduler=SchedulerConfig(max_model_len=max_model_len, **sched),  # type: ignore[arg-type]
        cache=CacheConfig(block_size=block_size, num_gpu_blocks=num_gpu_blocks),
    ).validate()


def small_runner(device: str, num_gpu_blocks: int = 64, block_size: int = 4) -> TorchRunner:
    config = engine_config(num_gpu_blocks, block_size)
    return TorchRunner(config, device=device, preset=SMALL, seed=0, dtype="float32")


def chunk(
    req_id: str,
    token_ids: list[int],
    start: int,
    block_ids: Iterable[int],
    *,
    is_new: bool,
    sample: bool = True,
    hit: int = 0,
    spec: Iterable[int] = (),
) -> ScheduledChunk:
    drafts = tuple(spec)
    return ScheduledChunk(
        req_id=req_id,
        num_tokens=len(token_ids) + len(drafts),
        num_computed_before=start,
        is_prefill=len(token_ids) > 1,
        sample=sample,
        num_prefix_hit_tokens=hit,
        is_new=is_new,
        block_ids=tuple(block_ids),
        token_ids=tuple(token_ids),
        spec_token_ids=drafts,
    )


def plan(
    *chunks: ScheduledChunk,
    params: dict[str, SamplingParams] | None = None,
    finished: tuple[str, ...] = (),
    preempted: tuple[str, ...] = (),
    step: int = 0,
) -> SchedulerOutput:
    if params is None:
        params = {c.req_id: SamplingParams() for c in chunks if c.is_new}
    return SchedulerOutput(
        step=step,
        chunks=tuple(chunks),
        total_num_scheduled_tokens=sum(c.num_tokens for c in chunks),
        new_req_ids=tuple(c.req_id for c in chunks if c.is_new),
        resumed_req_ids=(),
        preempted_req_ids=preempted,
        preempted_tokens_lost=tuple(0 for _ in preempted),
        finished_req_ids=finished,
        num_running=len(chunks),
        num_waiting=0,
        kv_blocks_used=0,
        waiting_reasons=NO_WAITING,
        sampling_params=params,
    )


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)
