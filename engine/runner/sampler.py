"""Sampling for the torch runner: greedy, or temperature + top-p with a per-request generator.

Each request owns one `torch.Generator`, seeded from its `seed` (or, when it has none, from
the runner's seed and its id), created when it first enters RUNNING and kept across
preemption, so a seeded request draws the same tokens however it is scheduled.
`target_probs` is the same distribution as a full-vocabulary tensor, for verifying drafts.
"""

from __future__ import annotations

import zlib

import torch

from engine.request import SamplingParams


def request_seed(runner_seed: int, req_id: str, params: SamplingParams) -> int:
    if params.seed is not None:
        return params.seed
    return (runner_seed * 1_000_003 + zlib.crc32(req_id.encode("utf-8"))) & 0x7FFF_FFFF_FFFF


class RequestSampling:
    """A request's sampling params and, for random sampling, its generator."""

    __slots__ = ("generator", "params")

    def __init__(self, params: SamplingParams, seed: int, device: torch.device) -> None:
        self.params = params
        self.generator: torch.Generator | None = None
        if params.temperature > 0:
            self.generator = torch.Generator(device=device).manual_seed(seed)


GREEDY = RequestSampling(SamplingParams(), 0, torch.device("cpu"))


def sample(logits: torch.Tensor, states: list[RequestSampling]) -> list[int]:
    """One token per row of `logits` [S, V] (float32), row i sampled with `states[i]`."""
    tokens = torch.argmax(logits, dim=-1)
    for row, state in enumerate(states):
        params = state.params
        if params.temperature <= 0 or state.generator is None:
            continue
        probs = torch.softmax(logits[row] / params.temperature, dim=-1)
        if params.top_p < 1.0:
            sorted_p, order = probs.sort(descending=True)
            keep = top_p_keep(sorted_p, params.top_p)
            choice = torch.multinomial(sorted_p * keep, 1, generator=state.generator)
            tokens[row] = order[choice[0]]
        else:
            tokens[row] = torch.multinomial(probs, 1, generator=state.generator)[0]
    return [int(t) for t in tokens.tolist()]


def top_p_keep(sorted_probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask over probabilities sorted in descending order: the smallest prefix whose mass
    reaches top_p (always the first token)."""
    return (sorted_probs.cumsum(-1) - sorted_probs) < top_p


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution `sample` draws from, per row of `logits` [N, V] (float32, temperature
    > 0): softmax(logits / temperature), top-p applied and renormalised."""
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        kept = sorted_p * top_p_keep(sorted_p, params.top_p)
        probs = torch.zeros_like(probs).scatter_(-1, order, kept)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs
