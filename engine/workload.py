"""Synthetic arrivals: a seeded Poisson process with exponential length distributions.

Used as an EngineCore `before_step` hook, so arrivals are injected on the engine thread
against the engine's own clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from engine.engine import Engine
from engine.request import SamplingParams

# Byte-level token ids (3..258) keep synthetic prompts valid for every runner.
TOKEN_LOW, TOKEN_HIGH = 3, 258


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    enabled: bool = True
    rate: float = 2.0
    """Mean arrivals per second."""
    prompt_len_mean: int = 96
    max_tokens_mean: int = 48
    max_prompt_len: int = 1000
    max_output: int = 512


class PoissonWorkload:
    def __init__(
        self, spec: WorkloadSpec, seed: int = 0, next_id: Callable[[], str] | None = None
    ) -> None:
        self.spec = spec
        self.rng = random.Random(seed)
        self._next_t: float | None = None
        self._count = 0
        self._next_id = next_id or self._default_id

    def _default_id(self) -> str:
        self._count += 1
        return f"p{self._count}"

    def update(self, **changes: object) -> WorkloadSpec:
        self.spec = replace(self.spec, **changes)  # type: ignore[arg-type]
        self._next_t = None
        return self.spec

    def _length(self, mean: int, cap: int) -> int:
        return max(1, min(cap, int(self.rng.expovariate(1.0 / max(mean, 1)))))

    def __call__(self, engine: Engine) -> None:
        spec = self.spec
        if not spec.enabled:
            return
        now = engine.now()
        if self._next_t is None:
            self._next_t = now + self.rng.expovariate(spec.rate)
        cap_prompt = min(spec.max_prompt_len, engine.config.scheduler.max_model_len // 2)
        while self._next_t <= now:
            plen = self._length(spec.prompt_len_mean, cap_prompt)
            prompt = [self.rng.randint(TOKEN_LOW, TOKEN_HIGH) for _ in range(plen)]
            max_tokens = self._length(spec.max_tokens_mean, spec.max_output)
            engine.add_request(self._next_id(), prompt, SamplingParams(max_tokens=max_tokens))
            self._next_t += self.rng.expovariate(spec.rate)
