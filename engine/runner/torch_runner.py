"""TorchRunner: run each step's plan as ONE packed forward over a paged KV cache, then sample.

The runner keeps only what a GPU worker keeps in vLLM: a block table and sampling state per
request, built from the SchedulerOutput (whole table when a request (re)enters RUNNING,
appended blocks otherwise). It never touches scheduler state; stops are the scheduler's.
Speculative decoding: `propose` is the n-gram drafter (ngram.py); a chunk's drafts are fed
after its tokens in the same forward and verified by the rejection sampler.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.outputs import PAD_DRAFT, ModelRunnerOutput, SchedulerOutput
from engine.runner.checkpoint import load_checkpoint
from engine.runner.model import LlamaModel, ModelConfig, preset_config, random_model
from engine.runner.ngram import NgramProposer
from engine.runner.paged_attention import AttentionMetadata, build_metadata
from engine.runner.rejection_sampler import rejection_sample
from engine.runner.sampler import GREEDY, RequestSampling, request_seed
from engine.runner.tokenizer import Tokenizer, load_tokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _verified_drafts(drafts: Sequence[int]) -> Sequence[int]:
    """The drafts up to the first placeholder: verification stops there (rejected)."""
    if PAD_DRAFT not in drafts:
        return drafts
    return drafts[: list(drafts).index(PAD_DRAFT)]


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r} (choose auto, cpu or cuda)")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but CUDA is not available")
    return torch.device(device)


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    aliases = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}
    name = aliases.get(dtype, dtype)
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} (choose float32, bfloat16 or float16)")
    return DTYPES[name]


def kv_blocks_for_memory(
    cfg: ModelConfig, block_size: int, dtype: torch.dtype, gpu_memory_utilization: float
) -> int:
    """KV blocks that fit once the process uses `gpu_memory_utilization` of the GPU (vLLM's
    knob): call after the model is loaded; counts what is already allocated as used."""
    if not torch.cuda.is_available():
        raise ValueError("gpu_memory_utilization needs CUDA")
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ValueError("gpu_memory_utilization must be in (0, 1]")
    free, total = torch.cuda.mem_get_info()
    budget = total * gpu_memory_utilization - (total - free)
    return max(0, int(budget // cfg.kv_bytes_per_block(block_size, dtype)))


class TorchRunner:
    name = "torch"
    simulated = False

    def __init__(
        self,
        config: EngineConfig,
        model_dir: str | None = None,
        device: str = "auto",
        preset: str | ModelConfig = "tiny",
        seed: int = 0,
        dtype: str | None = None,
        gpu_memory_utilization: float | None = None,
        num_threads: int | None = None,
    ) -> None:
        self.device = resolve_device(device)
        if self.device.type == "cpu":
            # Leave a core to the event loop and the scheduler: on a small machine torch's
            # default intra-op threads make small matmuls far slower, not faster.
            torch.set_num_threads(num_threads or max(1, (os.cpu_count() or 2) - 1))
        self.dtype = resolve_dtype(dtype, self.device)
        self.seed = seed
        self.model_dir = str(model_dir) if model_dir else None
        self.model: LlamaModel
        if self.model_dir:
            self.model = load_checkpoint(Path(self.model_dir), self.device, self.dtype)
        else:
            self.model = random_model(preset_config(preset), self.device, self.dtype, seed)
        self.model_config: ModelConfig = self.model.config
        eos = self.model_config.eos_token_ids
        self.tokenizer: Tokenizer = load_tokenizer(
            self.model_dir, self.model_config.bos_token_id, eos[0] if eos else None
        )
        self.block_size = config.cache.block_size
        self.num_gpu_blocks = config.cache.num_gpu_blocks
        if gpu_memory_utilization is not None:
            self.num_gpu_blocks = kv_blocks_for_memory(
                self.model_config, self.block_size, self.dtype, gpu_memory_utilization
            )
        cfg = self.model_config
        shape = (self.num_gpu_blocks, self.block_size, cfg.num_kv_heads, cfg.head_dim)
        self.kv_caches: list[tuple[torch.Tensor, torch.Tensor]] = [
            (
                torch.zeros(shape, dtype=self.dtype, device=self.device),
                torch.zeros(shape, dtype=self.dtype, device=self.device),
            )
            for _ in range(cfg.num_layers)
        ]
        self.block_tables: dict[str, list[int]] = {}
        self.sampling: dict[str, RequestSampling] = {}
        sc = config.scheduler
        self.drafter = NgramProposer(sc.prompt_lookup_min, sc.prompt_lookup_max, sc.max_model_len)

    @property
    def vocab_size(self) -> int:
        return self.model_config.vocab_size

    def check_token_ids(self, token_ids: Sequence[int]) -> None:
        """Raise ValueError unless every id is a valid model input (0 <= id < vocab)."""
        vocab = self.vocab_size
        for i, tid in enumerate(token_ids):
            if not 0 <= tid < vocab:
                raise ValueError(
                    f"token id {tid} at position {i} is outside the model's vocabulary "
                    f"(0..{vocab - 1})"
                )

    # ------------------------------------------------------------- per-request state
    def _update_states(self, output: SchedulerOutput) -> None:
        for req_id in output.finished_req_ids:
            self.block_tables.pop(req_id, None)
            self.sampling.pop(req_id, None)
        # NOTE: a preempted request loses its blocks but keeps its generator, so a seeded
        # request samples the same tokens after recompute (vLLM keeps it too).
        for req_id in output.preempted_req_ids:
            self.block_tables.pop(req_id, None)
        for req_id, params in output.sampling_params.items():
            state = self.sampling.get(req_id)
            if state is None or state.params != params:
                seed = request_seed(self.seed, req_id, params)
                self.sampling[req_id] = RequestSampling(params, seed, self.device)
        for chunk in output.chunks:
            if chunk.block_ids and not 0 < max(chunk.block_ids) < self.num_gpu_blocks:
                raise ValueError(
                    f"{chunk.req_id}: block ids {chunk.block_ids} outside the KV "
                    f"pool (1..{self.num_gpu_blocks - 1})"
                )
            if chunk.is_new:
                self.block_tables[chunk.req_id] = list(chunk.block_ids)
            else:
                self.block_tables.setdefault(chunk.req_id, []).extend(chunk.block_ids)

    def _forward(self, output: SchedulerOutput) -> tuple[torch.Tensor, AttentionMetadata]:
        """Update per-request state, then one forward over every chunk: hidden [T, H]."""
        chunks = output.chunks
        input_ids: list[int] = []
        for chunk in chunks:
            # Drafts are fed after the chunk's tokens, at the positions they stand for.
            chunk_ids = tuple(chunk.token_ids) + chunk.spec_token_ids
            if len(chunk_ids) != chunk.num_tokens:
                raise ValueError(
                    f"{chunk.req_id}: chunk has {len(chunk_ids)} token ids (drafts included) "
                    f"for {chunk.num_tokens} scheduled tokens"
                )
            if chunk.spec_token_ids and not chunk.sample:
                raise ValueError(f"{chunk.req_id}: drafts on a chunk that does not sample")
            if PAD_DRAFT in chunk.spec_token_ids:
                # A padded decode (vLLM 0.25+): placeholder drafts are fed as id 0 and are
                # never accepted (see _verified_drafts).
                chunk_ids = tuple(chunk.token_ids) + tuple(
                    0 if t == PAD_DRAFT else t for t in chunk.spec_token_ids
                )
            self.check_token_ids(chunk_ids)
            input_ids.extend(chunk_ids)
        self._update_states(output)
        meta = build_metadata(
            [c.num_tokens for c in chunks],
            [c.num_computed_before + c.num_tokens for c in chunks],
            [self.block_tables[c.req_id] for c in chunks],
            self.block_size,
            self.device,
        )
        ids = torch.tensor(input_ids, dtype=torch.long).to(self.device)
        return self.model(ids, self.kv_caches, meta), meta

    # ------------------------------------------------------------------- the seam
    @torch.inference_mode()
    def execute(self, output: SchedulerOutput) -> ModelRunnerOutput:
        if not output.chunks:
            self._update_states(output)
            return ModelRunnerOutput(sampled_token_ids={}, forward_ms=0.0, simulated=False)
        t0 = time.perf_counter()
        hidden, meta = self._forward(output)
        qsl = meta.query_start_loc
        sample_chunks = [(i, c) for i, c in enumerate(output.chunks) if c.sample]
        sampled: dict[str, list[int]] = {}
        if sample_chunks:
            # The last position of each sampling chunk, and before it one per draft: all
            # K + 1 verification positions come out of this one forward.
            rows: list[int] = []
            drafts = [_verified_drafts(c.spec_token_ids) for _, c in sample_chunks]
            for (i, c), valid in zip(sample_chunks, drafts, strict=True):
                first = qsl[i + 1] - 1 - len(c.spec_token_ids)
                rows.extend(range(first, first + len(valid) + 1))
            index = torch.tensor(rows).to(self.device)
            logits = self.model.compute_logits(hidden[index])
            states = [self.sampling.get(c.req_id, GREEDY) for _, c in sample_chunks]
            tokens = rejection_sample(logits, drafts, states)
            sampled = {c.req_id: t for (_, c), t in zip(sample_chunks, tokens, strict=True)}
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        forward_ms = (time.perf_counter() - t0) * 1000.0
        return ModelRunnerOutput(sampled_token_ids=sampled, forward_ms=forward_ms, simulated=False)

    def propose(
        self, requests: Sequence[tuple[str, Sequence[int]]], num_spec_tokens: int
    ) -> list[list[int]]:
        """Drafts for each (req_id, token_ids) after an update: prompt-lookup n-grams."""
        return self.drafter.propose(requests, num_spec_tokens)

    @torch.inference_mode()
    def compute_logits(
        self, output: SchedulerOutput, all_positions: bool = True
    ) -> dict[str, torch.Tensor]:
        """Run the step like `execute` (same cache writes and state updates) but return float32
        logits per request: every chunk position [n, V], or only the last [1, V]; for tests."""
        if not output.chunks:
            self._update_states(output)
            return {}
        hidden, meta = self._forward(output)
        qsl = meta.query_start_loc
        result: dict[str, torch.Tensor] = {}
        for i, chunk in enumerate(output.chunks):
            start = qsl[i] if all_positions else qsl[i + 1] - 1
            result[chunk.req_id] = self.model.compute_logits(hidden[start : qsl[i + 1]]).cpu()
        return result

    def describe(self) -> dict[str, object]:
        cfg = self.model_config
        kv_bytes = cfg.kv_bytes_per_block(self.block_size, self.dtype) * self.num_gpu_blocks
        return {
            "runner": "torch",
            "model": cfg.name,
            "preset": None if self.model_dir else cfg.name,
            "model_dir": self.model_dir,
            "params": sum(p.numel() for p in self.model.parameters()),
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "vocab_size": cfg.vocab_size,
            "num_layers": cfg.num_layers,
            "hidden_size": cfg.hidden_size,
            "num_heads": cfg.num_heads,
            "num_kv_heads": cfg.num_kv_heads,
            "tokenizer": self.tokenizer.name,
            "num_gpu_blocks": self.num_gpu_blocks,
            "block_size": self.block_size,
            "kv_cache_mib": round(kv_bytes / 2**20, 2),
        }
