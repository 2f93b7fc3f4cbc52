"""Runner benchmarks on the torch runner.

(a) Continuous batching (our Engine) vs static batching (fixed batches, prompts padded to the
    batch's longest, every row decoded until the batch's longest output is done, new requests
    wait for the whole batch) on the same model and the same arrival trace.
(b) Step time vs batch composition (decode-only batches of N; one prefill chunk of C plus N
    decodes), the data `calibrate` fits the SimRunner's CostModel to by least squares.

    python -m bench.runner_bench [--device auto|cpu|cuda] [--preset tiny|medium] [--threads N]
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from dataclasses import dataclass

from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.engine import Engine
from engine.outputs import ScheduledChunk, SchedulerOutput
from engine.reasons import NO_WAITING
from engine.request import SamplingParams
from engine.runner.calibrate import calibrate, fit_cost_model, measure_step_times
from engine.runner.torch_runner import TorchRunner

__all__ = ["calibrate", "compare_batching", "fit_cost_model", "main", "measure_step_times"]

BLOCK_SIZE = 16


@dataclass(frozen=True)
class TraceRequest:
    req_id: str
    arrival_s: float
    prompt_token_ids: tuple[int, ...]
    max_tokens: int


@dataclass(frozen=True)
class BatchingResult:
    name: str
    output_tokens: int
    duration_s: float
    ttft_mean_ms: float
    ttft_p99_ms: float
    itl_mean_ms: float
    itl_p99_ms: float

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.duration_s


def make_trace(
    num_requests: int = 48, seed: int = 0, duration_s: float = 0.5
) -> list[TraceRequest]:
    """Mixed lengths: prompts 16-128 tokens; 75% short outputs (8-32), 25% long (128-192);
    arrivals spread uniformly over `duration_s` (faster than the model serves them)."""
    rng = random.Random(seed)
    trace = []
    for i in range(num_requests):
        prompt = tuple(rng.randrange(3, 259) for _ in range(rng.randint(16, 128)))
        out = rng.randint(128, 192) if rng.random() < 0.25 else rng.randint(8, 32)
        trace.append(TraceRequest(f"q{i}", rng.uniform(0, duration_s), prompt, out))
    return sorted(trace, key=lambda r: r.arrival_s)


def bench_config(max_num_seqs: int, trace: list[TraceRequest]) -> EngineConfig:
    # Room for static batching's worst case: the longest prompt padded plus the longest output.
    longest = max(len(r.prompt_token_ids) for r in trace) + max(r.max_tokens for r in trace)
    blocks = max_num_seqs * (-(-longest // BLOCK_SIZE)) + 1
    return EngineConfig(
        scheduler=SchedulerConfig(
            max_num_batched_tokens=512, max_num_seqs=max_num_seqs, max_model_len=longest + 1
        ),
        cache=CacheConfig(
            block_size=BLOCK_SIZE, num_gpu_blocks=blocks, enable_prefix_caching=False
        ),
    ).validate()


def _summarise(
    name: str, trace: list[TraceRequest], times: dict[str, list[float]], end: float
) -> BatchingResult:
    ttft = [(times[r.req_id][0] - r.arrival_s) * 1000 for r in trace]
    itl = [(b - a) * 1000 for ts in times.values() for a, b in itertools.pairwise(ts)]
    return BatchingResult(
        name=name,
        output_tokens=sum(len(ts) for ts in times.values()),
        duration_s=end,
        ttft_mean_ms=statistics.fmean(ttft),
        ttft_p99_ms=_p99(ttft),
        itl_mean_ms=statistics.fmean(itl) if itl else 0.0,
        itl_p99_ms=_p99(itl) if itl else 0.0,
    )


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def _wait_until(t0: float, t: float) -> None:
    delay = t - (time.perf_counter() - t0)
    if delay > 0:
        time.sleep(delay)


def run_continuous(
    runner: TorchRunner, trace: list[TraceRequest], config: EngineConfig
) -> BatchingResult:
    engine = Engine(config, runner)
    times: dict[str, list[float]] = {r.req_id: [] for r in trace}
    pending = list(trace)
    t0 = time.perf_counter()
    while pending or engine.has_unfinished_requests():
        now = time.perf_counter() - t0
        while pending and pending[0].arrival_s <= now:
            r = pending.pop(0)
            params = SamplingParams(max_tokens=r.max_tokens, ignore_eos=True)
            engine.add_request(r.req_id, list(r.prompt_token_ids), params)
        if not engine.has_unfinished_requests():
            _wait_until(t0, pending[0].arrival_s)
            continue
        event = engine.step()
        t = time.perf_counter() - t0
        for req_id in event.sampled_req_ids:
            times[req_id].append(t)
    return _summarise("continuous", trace, times, time.perf_counter() - t0)


def _static_step(
    step: int, chunks: list[ScheduledChunk], finished: tuple[str, ...] = ()
) -> SchedulerOutput:
    return SchedulerOutput(
        step=step,
        chunks=tuple(chunks),
        total_num_scheduled_tokens=sum(c.num_tokens for c in chunks),
        new_req_ids=(),
        resumed_req_ids=(),
        preempted_req_ids=(),
        preempted_tokens_lost=(),
        finished_req_ids=finished,
        num_running=len(chunks),
        num_waiting=0,
        kv_blocks_used=0,
        waiting_reasons=NO_WAITING,
    )


def run_static(runner: TorchRunner, trace: list[TraceRequest], batch_size: int) -> BatchingResult:
    """HF-generate-style static batching on the same runner (greedy, left padding with id 0)."""
    times: dict[str, list[float]] = {r.req_id: [] for r in trace}
    pending = list(trace)
    finished: tuple[str, ...] = ()
    step = 0
    t0 = time.perf_counter()
    while pending:
        _wait_until(t0, pending[0].arrival_s)
        now = time.perf_counter() - t0
        batch = [r for r in pending if r.arrival_s <= now][:batch_size]
        pending = [r for r in pending if r not in batch]
        plen = max(len(r.prompt_token_ids) for r in batch)
        steps = max(r.max_tokens for r in batch)
        nblocks = -(-(plen + steps) // BLOCK_SIZE)
        chunks = []
        for i, r in enumerate(batch):
            padded = (0,) * (plen - len(r.prompt_token_ids)) + r.prompt_token_ids
            table = tuple(1 + i * nblocks + j for j in range(nblocks))
            chunks.append(ScheduledChunk(r.req_id, plen, 0, True, True, 0, True, table, padded))
        out = runner.execute(_static_step(step, chunks, finished))
        for k in range(steps):  # every row decodes until the longest is done
            t = time.perf_counter() - t0
            for r in batch:
                if k < r.max_tokens:
                    times[r.req_id].append(t)
            if k == steps - 1:
                break
            step += 1
            chunks = [
                ScheduledChunk(
                    req_id=r.req_id,
                    num_tokens=1,
                    num_computed_before=plen + k,
                    is_prefill=False,
                    sample=True,
                    num_prefix_hit_tokens=0,
                    is_new=False,
                    block_ids=(),
                    token_ids=tuple(out.sampled_token_ids[r.req_id]),
                )
                for r in batch
            ]
            out = runner.execute(_static_step(step, chunks))
        finished = tuple(r.req_id for r in batch)
        step += 1
    return _summarise("static", trace, times, time.perf_counter() - t0)


def compare_batching(
    device: str = "auto",
    preset: str = "tiny",
    num_requests: int = 48,
    batch_size: int = 16,
) -> tuple[BatchingResult, BatchingResult]:
    """(continuous, static) on one runner and one trace; the runner is warmed up first."""
    trace = make_trace(num_requests)
    config = bench_config(batch_size, trace)
    runner = TorchRunner(config, device=device, preset=preset)
    run_static(runner, make_trace(4, seed=1, duration_s=0.0), batch_size)  # warm-up
    return run_continuous(runner, trace, config), run_static(runner, trace, batch_size)


def _print_batching(cont: BatchingResult, static: BatchingResult) -> None:
    print(
        f"{'batching':<11} {'tokens':>6} {'time s':>7} {'tok/s':>8} {'TTFT ms mean/p99':>18} "
        f"{'ITL ms mean/p99':>16}"
    )
    for r in (cont, static):
        print(
            f"{r.name:<11} {r.output_tokens:>6} {r.duration_s:>7.2f} {r.tokens_per_s:>8.1f} "
            f"{r.ttft_mean_ms:>8.1f}/{r.ttft_p99_ms:<9.1f} "
            f"{r.itl_mean_ms:>7.1f}/{r.itl_p99_ms:<8.1f}"
        )
    print(f"continuous / static tokens/s: {cont.tokens_per_s / static.tokens_per_s:.2f}x")


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(prog="python -m bench.runner_bench", description=__doc__)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch (default 1)")
    parser.add_argument("--requests", type=int, default=48)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    cont, static = compare_batching(
        device=args.device, preset=args.preset, num_requests=args.requests
    )
    _print_batching(cont, static)
    runner = TorchRunner(
        EngineConfig(cache=CacheConfig(num_gpu_blocks=1024)).validate(),
        device=args.device,
        preset=args.preset,
    )
    samples = measure_step_times(runner)
    model = fit_cost_model(samples)
    print(f"\nstep time vs batch composition ({runner.describe()['device']}, {args.preset})")
    print(f"{'tokens':>6} {'seqs':>5} {'context':>8} {'ms':>8} {'fit ms':>8}")
    for s in samples:
        fit = model.step_ms(s.num_tokens, s.num_seqs, s.context_tokens)
        print(f"{s.num_tokens:>6} {s.num_seqs:>5} {s.context_tokens:>8} {s.ms:>8.2f} {fit:>8.2f}")
    print(f"CostModel: {model}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
