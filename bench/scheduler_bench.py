"""Scheduler cost per step (schedule + update_from_output + event build) with N running
decodes, against vLLM 0.20's own schedule + update measured on this machine class.

Run: `make bench` (or `python -m bench.scheduler_bench`).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.engine import Engine
from engine.request import SamplingParams
from engine.runner.sim import SimRunner

# vLLM 0.20.0's schedule()+update_from_output() as the issue measured it on this machine
# class; used only when the vLLM venv (`make vllm-venv`) is missing.
VLLM_REFERENCE_US = {64: 540.0, 256: 2100.0, 1024: 9600.0}
SIZES = (64, 256, 1024)
VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"


def vllm_baseline() -> tuple[dict[int, float], str]:
    """Measure vLLM in this same run when its venv exists, else the issue's figures."""
    if VLLM_PYTHON.exists():
        proc = subprocess.run(
            [str(VLLM_PYTHON), "-m", "bench.vllm_baseline", *map(str, SIZES)],
            cwd=VLLM_PYTHON.parents[2],
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"},
        )
        if proc.returncode == 0:
            measured = json.loads(proc.stdout.strip().splitlines()[-1])
            return {int(k): float(v) for k, v in measured.items()}, "measured in this run"
        print(f"(vLLM baseline failed: {proc.stderr.strip()[-300:]})")
    return dict(VLLM_REFERENCE_US), "the issue's figures (no .venv-vllm)"


def measure(num_running: int, steps: int = 200) -> float:
    config = EngineConfig(
        scheduler=SchedulerConfig(
            max_num_batched_tokens=max(8192, num_running * 16),
            max_num_seqs=num_running,
            max_model_len=2048,
        ),
        cache=CacheConfig(block_size=16, num_gpu_blocks=num_running * 64 + 1),
    ).validate()
    engine = Engine(config, SimRunner())
    for i in range(num_running):
        engine.add_request(
            f"r{i}", [1 + (i * 7 + j) % 30000 for j in range(16)], SamplingParams(max_tokens=1000)
        )
    engine.step()  # the prefill step; every later step is N decodes
    samples = []
    for _ in range(steps):
        ev = engine.step()
        assert len(ev.chunks) == num_running and ev.decode_tokens == num_running
        samples.append(ev.overhead_us)
    return statistics.median(samples)


def main() -> int:
    baseline, source = vllm_baseline()
    print("scheduler step cost (schedule + update + event build), SimRunner, N running decodes")
    print(f"baseline: vLLM 0.20.0 schedule() + update_from_output(), {source}")
    print(
        f"{'N':>6} {'ours median us':>15} {'us/request':>11} {'vLLM 0.20 us':>13} "
        f"{'ratio':>6} {'target <= 0.5':>13}"
    )
    ok = True
    for n in SIZES:
        t0 = time.perf_counter()
        ours = measure(n)
        ref = baseline[n]
        ratio = ours / ref
        ok &= ratio <= 0.5
        print(
            f"{n:>6} {ours:>15.1f} {ours / n:>11.2f} {ref:>13.0f} {ratio:>6.2f} "
            f"{'yes' if ratio <= 0.5 else 'NO':>13}   ({time.perf_counter() - t0:.1f}s)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
