"""The lab's sweeps, timed end to end (worker processes started, every point run):

- the article's section 6 sweep (48 decodes + one 8,000-token prompt; the token budget at
  8 values x 3 repeats = 24 runs; SimRunner with the h100:llama-3-8b roofline), target
  <= 20 s on this machine;
- a 4-value sweep of a small generated workload on the torch runner (CPU, one thread per
  worker), time reported.

Run: `make bench` (or `python -m bench.lab_bench`).
"""

from __future__ import annotations

import os
import sys
import time

from app.lab.experiments import get_experiment
from app.lab.sources import workload_spec
from engine.sweep import PointResult, parse_knob
from engine.sweep_pool import run_sweep

TARGET_S = 20.0


def timed(label: str, **kwargs: object) -> tuple[float, list[PointResult]]:
    t0 = time.perf_counter()
    results = run_sweep(**kwargs)  # type: ignore[arg-type]
    wall = time.perf_counter() - t0
    failed = [r for r in results if r.error]
    print(f"{label}: {len(results)} runs in {wall:.2f} s ({len(failed)} failed)")
    for r in failed[:3]:
        print(f"  failed: {r.point.knobs}: {r.error}")
    return wall, results


def main() -> int:
    workers = os.cpu_count() or 1
    print(f"lab sweeps, {workers} worker processes (spawn)")
    s6 = get_experiment("s6_chunk_size").spec()
    wall, results = timed(
        "section 6 sweep (8 budgets x 3 repeats, sim, h100:llama-3-8b)",
        base=s6.base, knobs=s6.knobs, repeat=3, runner="sim", cost_model=s6.cost_model,
        workers=workers,
    )  # fmt: skip
    print(f"  {'budget':>7} {'TTFT p99 ms':>12} {'ITL p99 ms':>11} {'mean step ms':>13}")
    for r in results[::3]:
        m = r.metrics
        print(
            f"  {r.point.knobs['max_num_batched_tokens']:>7} {m['ttft_p99_ms']:>12.1f} "
            f"{m['itl_p99_ms']:>11.2f} {m['mean_step_ms']:>13.3f}"
        )
    ok = wall <= TARGET_S and len(results) == 24 and not any(r.error for r in results)
    print(f"  target <= {TARGET_S:.0f} s: {'yes' if ok else 'NO'}")

    small = workload_spec("poisson:rate=50,n=16,prompt=64,output=16", seed=0)
    small["config"].update({"max_num_seqs": 16, "max_model_len": 512})
    knob = parse_knob("max_num_batched_tokens=32,64,128,256")
    torch_wall, torch_results = timed(
        "torch sweep (4 budgets, 16 requests ~64+16 tokens, tiny model on CPU)",
        base=small, knobs=[knob], runner="torch", workers=workers,
    )  # fmt: skip
    for r in torch_results:
        m = r.metrics
        print(
            f"  budget {r.point.knobs['max_num_batched_tokens']:>4}: {m['steps']:.0f} steps, "
            f"{m['output_tokens_per_s']:.0f} output tok/s, mean step {m['mean_step_ms']:.2f} ms"
        )
    ok &= len(torch_results) == 4 and not any(r.error for r in torch_results)
    print(f"torch sweep wall time: {torch_wall:.2f} s (reported, no target)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
