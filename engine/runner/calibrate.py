"""Step time vs batch composition on a real runner, and the least-squares fit of the
SimRunner's CostModel to it (what `batchscope calibrate` writes).

Features follow `CostModel.step_ms`: 1, scheduled tokens, sequences, context tokens / 1000
(context = sum over chunks of num_computed_before + num_tokens). The fit is non-negative
least squares: a coefficient that would come out negative is dropped (set to 0) and the
rest refitted, so the simulator never predicts cheaper steps for bigger batches.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Protocol

from engine.kv_cache_manager import cdiv
from engine.outputs import ModelRunnerOutput, ScheduledChunk, SchedulerOutput
from engine.reasons import NO_WAITING
from engine.runner.cost_model import ModelSpec, RooflineCostModel
from engine.runner.sim import CostModel

DECODE_BATCHES = (1, 2, 4, 8, 16, 32)
DECODE_CONTEXTS = (64, 512)
PREFILL_CHUNKS = (32, 128, 256, 512)
PREFILL_DECODES = (0, 4, 16)
PREFILL_DECODE_CONTEXT = 128


class PagedRunner(Protocol):
    block_size: int
    num_gpu_blocks: int

    def execute(self, output: SchedulerOutput) -> ModelRunnerOutput: ...


@dataclass(frozen=True)
class StepSample:
    num_tokens: int
    num_seqs: int
    context_tokens: int
    ms: float
    """Median of the runner's own forward_ms over the repeats."""
    chunks: tuple[tuple[int, int], ...] = ()
    """The composition as (start, num_tokens) per chunk, for the roofline fit."""


def compositions() -> list[tuple[int, list[int]]]:
    """(prefill chunk C or 0, decode contexts): decode-only N, then C + N decodes."""
    out: list[tuple[int, list[int]]] = []
    for ctx in DECODE_CONTEXTS:
        out += [(0, [ctx] * n) for n in DECODE_BATCHES]
    for c in PREFILL_CHUNKS:
        out += [(c, [PREFILL_DECODE_CONTEXT] * n) for n in PREFILL_DECODES]
    return out


class _Planner:
    """Synthetic plans: fresh requests each time (is_new), dropped by the next plan."""

    def __init__(self, runner: PagedRunner) -> None:
        self.runner = runner
        self.count = 0
        self.next_block = 0
        self.previous: tuple[str, ...] = ()

    def _chunk(self, start: int, num_tokens: int) -> ScheduledChunk:
        bs, usable = self.runner.block_size, self.runner.num_gpu_blocks - 1
        nblocks = cdiv(start + num_tokens, bs)
        # Distinct blocks while the pool lasts, then wrapped: harmless for timing.
        table = tuple(1 + (self.next_block + j) % usable for j in range(nblocks))
        self.next_block += nblocks
        self.count += 1
        tokens = tuple(3 + (start + j) % 250 for j in range(num_tokens))
        return ScheduledChunk(
            f"cal{self.count}", num_tokens, start, num_tokens > 1, True, 0, True, table, tokens
        )

    def plan(self, prefill: int, decode_contexts: list[int]) -> SchedulerOutput:
        chunks = [self._chunk(ctx - 1, 1) for ctx in decode_contexts]
        if prefill:
            chunks.append(self._chunk(0, prefill))
        out = SchedulerOutput(
            step=self.count,
            chunks=tuple(chunks),
            total_num_scheduled_tokens=sum(c.num_tokens for c in chunks),
            new_req_ids=tuple(c.req_id for c in chunks),
            resumed_req_ids=(),
            preempted_req_ids=(),
            preempted_tokens_lost=(),
            finished_req_ids=self.previous,
            num_running=len(chunks),
            num_waiting=0,
            kv_blocks_used=0,
            waiting_reasons=NO_WAITING,
        )
        self.previous = tuple(c.req_id for c in chunks)
        return out


def measure_step_times(runner: PagedRunner, repeats: int = 5) -> list[StepSample]:
    planner = _Planner(runner)
    samples = []
    for prefill, decodes in compositions():
        runner.execute(planner.plan(prefill, decodes))  # warm-up
        times = [runner.execute(planner.plan(prefill, decodes)).forward_ms for _ in range(repeats)]
        chunks = tuple((ctx - 1, 1) for ctx in decodes) + (((0, prefill),) if prefill else ())
        samples.append(
            StepSample(
                prefill + len(decodes),
                len(decodes) + (1 if prefill else 0),
                prefill + sum(decodes),
                statistics.median(times),
                chunks,
            )
        )
    return samples


def _solve(rows: list[list[float]], ys: list[float]) -> list[float]:
    """Least squares by the normal equations (Gaussian elimination, partial pivoting)."""
    k = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    b = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda i: abs(a[i][col]))
        a[col], a[pivot], b[col], b[pivot] = a[pivot], a[col], b[pivot], b[col]
        if abs(a[col][col]) < 1e-12:
            raise ValueError("calibration data cannot separate the cost terms")
        for i in range(col + 1, k):
            f = a[i][col] / a[col][col]
            a[i] = [x - f * y for x, y in zip(a[i], a[col], strict=True)]
            b[i] -= f * b[col]
    x = [0.0] * k
    for i in reversed(range(k)):
        x[i] = (b[i] - sum(a[i][j] * x[j] for j in range(i + 1, k))) / a[i][i]
    return x


def fit_cost_model(samples: list[StepSample]) -> CostModel:
    features = [[1.0, s.num_tokens, s.num_seqs, s.context_tokens / 1000.0] for s in samples]
    ys = [s.ms for s in samples]
    active = [0, 1, 2, 3]
    coef = [0.0] * 4
    while active:
        sol = _solve([[f[i] for i in active] for f in features], ys)
        if min(sol) >= 0:
            coef = [0.0] * 4
            for i, c in zip(active, sol, strict=True):
                coef[i] = c
            break
        active.pop(sol.index(min(sol)))
    return CostModel(*(round(c, 6) for c in coef))


def fit_roofline(samples: list[StepSample], spec: ModelSpec) -> RooflineCostModel:
    """Fit the roofline's peak FLOP/s, bandwidth and launch overhead for a model (mfu and
    mbu folded into them: 1.0) to measured steps, minimising squared relative error over a
    log grid (the max() makes it non-linear; the grid is small and exact enough)."""
    base = RooflineCostModel(
        spec.num_params,
        spec.num_layers,
        spec.q_dim,
        spec.kv_dim,
        spec.bytes_per_param,
        peak_flops=1.0,
        bandwidth=1.0,
        launch_ms=0.0,
        mfu=1.0,
        mbu=1.0,
        name=spec.name,
    )
    parts = [base.step_parts(s.chunks) for s in samples]
    ys = [s.ms for s in samples]
    best: tuple[float, float, float, float] | None = None
    for i in range(61):
        peak = 10 ** (9 + i * 0.125)
        for j in range(61):
            bw = 10 ** (8 + j * 0.1)
            roof = [max(f / peak, b / bw) * 1000.0 for f, b in parts]
            launch = max(0.0, statistics.fmean(y - r for y, r in zip(ys, roof, strict=True)))
            err = sum(((r + launch - y) / y) ** 2 for r, y in zip(roof, ys, strict=True) if y > 0)
            if best is None or err < best[0]:
                best = (err, peak, bw, launch)
    assert best is not None
    _, peak, bw, launch = best
    return replace(base, peak_flops=peak, bandwidth=bw, launch_ms=round(launch, 6))


DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def model_spec(description: dict[str, object]) -> ModelSpec:
    """The roofline's view of a runner's model, from its `describe()`."""
    hidden = int(str(description["hidden_size"]))
    heads = int(str(description["num_heads"]))
    kv_heads = int(str(description["num_kv_heads"]))
    return ModelSpec(
        str(description.get("model", "model")),
        float(str(description["params"])),
        int(str(description["num_layers"])),
        hidden,
        kv_heads * (hidden // heads),
        DTYPE_BYTES.get(str(description.get("dtype")), 4),
    )


def calibrate(runner: PagedRunner, repeats: int = 5) -> CostModel:
    """Measure step times on `runner` and fit the SimRunner's CostModel to them."""
    return fit_cost_model(measure_step_times(runner, repeats))
