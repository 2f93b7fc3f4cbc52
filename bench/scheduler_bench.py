"""Scheduler cost per step (schedule + update_from_output + event build) with N running
decodes, against vLLM's own schedule + update, per release: ours deciding as vLLM 0.20
against vLLM 0.20.0 (.venv-vllm), ours deciding as 0.33 against vLLM 0.33.0
(.venv-vllm-033), each baseline measured in this same run.

Targets: every ratio <= 0.5; at 256 running, <= 0.25 (issue 20 item 7, for 0.33).
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

ROOT = Path(__file__).resolve().parents[1]
# vLLM 0.20.0's schedule()+update_from_output() as the issue measured it on this machine
# class; used only when the vLLM venv (`make vllm-venv`) is missing.
VLLM_REFERENCE_US = {64: 540.0, 256: 2100.0, 1024: 9600.0}
SIZES = (64, 256, 1024)
VENVS = {"0.20": ".venv-vllm", "0.33": ".venv-vllm-033"}
"""The vLLM reference venv of each release (`make vllm-venv` builds both)."""
TARGET = 0.5
TARGET_256 = 0.25


def vllm_baseline(release: str) -> tuple[dict[int, float] | None, str]:
    """vLLM `release` measured in this same run when its venv exists; else the issue's
    figures for 0.20, none for the others."""
    python = ROOT / VENVS[release] / "bin" / "python"
    if python.exists():
        proc = subprocess.run(
            [str(python), "-m", "bench.vllm_baseline", *map(str, SIZES)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"},
        )
        if proc.returncode == 0:
            measured = json.loads(proc.stdout.strip().splitlines()[-1])
            return {int(k): float(v) for k, v in measured.items()}, "measured in this run"
        print(f"(vLLM {release} baseline failed: {proc.stderr.strip()[-300:]})")
    if release == "0.20":
        return dict(VLLM_REFERENCE_US), "the issue's figures (no .venv-vllm)"
    return None, f"no {VENVS[release]}"


def measure(num_running: int, release: str, steps: int = 200) -> float:
    config = EngineConfig(
        scheduler=SchedulerConfig(
            max_num_batched_tokens=max(8192, num_running * 16),
            max_num_seqs=num_running,
            max_model_len=2048,
        ),
        cache=CacheConfig(block_size=16, num_gpu_blocks=num_running * 64 + 1),
        vllm_version=release,
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
    print("scheduler step cost (schedule + update + event build), SimRunner, N running decodes")
    ok = True
    for release in VENVS:
        baseline, source = vllm_baseline(release)
        print(f"\nours as vLLM {release} vs vLLM {release}'s schedule() + update_from_output()")
        print(f"baseline: {source}")
        if baseline is None:
            print("(skipped: no baseline)")
            continue
        print(
            f"{'N':>6} {'ours median us':>15} {'us/request':>11} {'vLLM us':>9} "
            f"{'ratio':>6} {'target':>7} {'met':>4}"
        )
        for n in SIZES:
            t0 = time.perf_counter()
            ours = measure(n, release)
            ratio = ours / baseline[n]
            target = TARGET_256 if n == 256 else TARGET
            ok &= ratio <= target
            print(
                f"{n:>6} {ours:>15.1f} {ours / n:>11.2f} {baseline[n]:>9.0f} {ratio:>6.2f} "
                f"{'<= ' + str(target):>7} {'yes' if ratio <= target else 'NO':>4}"
                f"   ({time.perf_counter() - t0:.1f}s)"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
