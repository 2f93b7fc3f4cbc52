"""DemoWorkload: the arrivals a first visit sees, a short scripted wave played again and
again, sized to the default knobs (256 tokens a step, 16 sequences, 257 blocks of 16) so
that in its first seconds, on the built-in model on a CPU, the page shows what the
article explains (docs/demo.md):

- decodes: a group of requests with short prompts and long outputs starts decoding;
- chunked prefill beside them: a long prompt arrives a few steps later and is prefilled
  in chunks, in the budget the decodes leave;
- waiting for budget and for KV blocks: a burst arrives at once; what does not fit the
  step's token budget waits (`token_budget`), and as the running requests grow, what no
  free block can hold waits (`kv_blocks`);
- a preemption and its recompute: together they outgrow the KV pool, the latest running
  request is preempted (its blocks freed) and later recomputes its tokens from scratch.

Then the engine drains; PAUSE_S after it went idle the wave starts again. An EngineCore
`before_step` hook, on the engine thread, against the engine's own clock (like
engine.workload.PoissonWorkload). Prompts are seeded byte-level ids (valid for every
runner), different each wave (no prefix cache hits across waves).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from engine.engine import Engine
from engine.request import SamplingParams
from engine.workload import TOKEN_HIGH, TOKEN_LOW


@dataclass(frozen=True, slots=True)
class Arrival:
    after_steps: int
    """Steps into the wave (counted from its first arrival)."""
    count: int
    prompt_len: int
    max_tokens: int


WAVE = (
    Arrival(0, 6, 32, 160),  # decoders
    Arrival(3, 1, 700, 16),  # a long prompt, chunked beside the decodes
    Arrival(5, 8, 400, 96),  # a burst: waits for budget, then outgrows the KV pool
)
PAUSE_S = 2.0
"""Idle time between waves (the last wave's bars stay on screen a moment)."""


class DemoWorkload:
    def __init__(
        self,
        seed: int = 0,
        next_id: Callable[[], str] | None = None,
        wave: tuple[Arrival, ...] = WAVE,
        pause_s: float = PAUSE_S,
    ) -> None:
        self.rng = random.Random(seed)
        self.wave = wave
        self.pause_s = pause_s
        self.waves = 0
        self._start_step: int | None = None
        self._next = 0
        self._idle_since: float | None = None
        self._count = 0
        self._next_id = next_id or self._default_id

    def _default_id(self) -> str:
        self._count += 1
        return f"d{self._count}"

    def __call__(self, engine: Engine) -> None:
        if self._start_step is None:
            if engine.has_unfinished_requests():
                self._idle_since = None
                return
            now = engine.now()
            if self._idle_since is None:
                # The first wave starts at once; later ones after a pause.
                self._idle_since = now - (self.pause_s if self.waves == 0 else 0.0)
            if now - self._idle_since < self.pause_s:
                return
            self._start_step, self._next = engine.step_index, 0
            self.waves += 1
        into = engine.step_index - self._start_step
        max_len = engine.config.scheduler.max_model_len
        while self._next < len(self.wave) and self.wave[self._next].after_steps <= into:
            a = self.wave[self._next]
            plen = max(1, min(a.prompt_len, max_len - a.max_tokens))
            for _ in range(a.count):
                prompt = [self.rng.randint(TOKEN_LOW, TOKEN_HIGH) for _ in range(plen)]
                engine.add_request(self._next_id(), prompt, SamplingParams(max_tokens=a.max_tokens))
            self._next += 1
        if self._next >= len(self.wave):
            self._start_step, self._idle_since = None, None
