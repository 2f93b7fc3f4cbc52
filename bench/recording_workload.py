"""Workloads for bench.recording_bench: an engine config plus a step-based arrival rule
(seeded, so every run records the same session shape)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from app.live.hub import EventHub
from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.engine import Engine
from engine.events import EventSink
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from tests.app.records.helpers import open_sim_session


@dataclass
class Workload:
    config: EngineConfig
    arrivals: Callable[[Engine, random.Random], None]
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    count: int = 0

    def add(self, engine: Engine, prompt_len: int, max_tokens: int) -> None:
        self.count += 1
        prompt = [self.rng.randint(3, 258) for _ in range(prompt_len)]
        engine.add_request(f"r{self.count}", prompt, SamplingParams(max_tokens=max_tokens))

    @classmethod
    def full_decode(cls, seqs: int, steps: int = 8000) -> Workload:
        """`seqs` requests that decode for the whole run: every step has `seqs` members."""
        config = EngineConfig(
            SchedulerConfig(
                max_num_batched_tokens=seqs * 16, max_num_seqs=seqs, max_model_len=steps + 64
            ),
            CacheConfig(block_size=16, num_gpu_blocks=seqs * (steps // 16 + 6) + 1),
        ).validate()

        def arrivals(engine: Engine, _rng: random.Random) -> None:
            if engine.step_index == 0:
                for _ in range(seqs):
                    wl.add(engine, 16, steps + 32)

        wl = cls(config, arrivals)
        return wl

    @classmethod
    def busy(cls, seqs: int) -> Workload:
        """Churn at full occupancy: arrivals keep `seqs` running and some waiting."""
        config = EngineConfig(
            SchedulerConfig(max_num_batched_tokens=2048, max_num_seqs=seqs, max_model_len=1024),
            CacheConfig(block_size=16, num_gpu_blocks=seqs * 40 + 1),
        ).validate()

        def arrivals(engine: Engine, rng: random.Random) -> None:
            sched = engine.scheduler
            while len(sched.running) + len(sched.waiting) < seqs + 8:
                wl.add(engine, rng.randint(32, 256), rng.randint(16, 256))

        wl = cls(config, arrivals)
        return wl

    @classmethod
    def steady(cls, seqs: int = 16, output_mean: int = 256) -> Workload:
        """A long-lived session at steady load: the live demo's budget (256 tokens), `seqs`
        always running (Exp-distributed prompts, mean 96, and outputs, mean `output_mean`)."""
        config = EngineConfig(
            SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=seqs, max_model_len=2048),
            CacheConfig(block_size=16, num_gpu_blocks=seqs * 100 + 1),
        ).validate()

        def arrivals(engine: Engine, rng: random.Random) -> None:
            sched = engine.scheduler
            while len(sched.running) + len(sched.waiting) < seqs + 2:
                prompt = max(1, min(500, int(rng.expovariate(1 / 96))))
                wl.add(engine, prompt, max(1, min(1024, int(rng.expovariate(1 / output_mean)))))

        wl = cls(config, arrivals)
        return wl


def open_session(hub: EventHub, name: str, workload: Workload) -> str:
    session = f"s-bench-{name}-{random.getrandbits(24):06x}"
    open_sim_session(hub, session, f"bench {name}", workload.config, SimRunner())
    return session


def run_steps(
    sink: EventSink,
    workload: Workload,
    steps: int,
    every: int = 0,
    on_every: Callable[[], None] | None = None,
) -> None:
    """`steps` engine steps at full speed (SimRunner) with the workload's arrivals."""
    engine = Engine(workload.config, SimRunner(), sink)
    for i in range(steps):
        workload.arrivals(engine, workload.rng)
        engine.step()
        if every and on_every is not None and (i + 1) % every == 0:
            on_every()
