"""Our scheduler against vLLM 0.20.0's own, step by step, on the shipped scenarios and on
random ones (budgets, chunking, thresholds, KV pressure and preemption, prefix caching
with shared and resumed prefixes, FCFS and priority, reserve_full_isl on and off), in every
engine loop: sync `Scheduler`, `AsyncScheduler` behind the batch queue of 2, and the sync
`Scheduler` with n-gram drafts (random scenarios take the three loops in turn)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT
from tests.vllm.test_adapter import _vllm_python

SCENARIOS = sorted(str(p) for p in (ROOT / "scenarios").glob("*.json"))


def _compare(*args: str) -> subprocess.CompletedProcess[str]:
    python = _vllm_python()
    if python is None:
        import os

        import pytest

        if os.environ.get("CI"):
            pytest.fail("no vLLM venv (make vllm-venv) in CI")
        pytest.skip("no vLLM venv: run `make vllm-venv`")
    return subprocess.run(
        [sys.executable, "tools/compare_scenario.py", "--vllm-python", str(python), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_shipped_scenarios_decide_exactly_as_vllm() -> None:
    proc = _compare(*SCENARIOS)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("identical") == len(SCENARIOS)


def test_random_scenarios_decide_exactly_as_vllm() -> None:
    proc = _compare("--random", "300", "--seed", "2026", "--mode", "all")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "300 scenarios, seed 2026: 0 mismatching" in proc.stdout


def test_random_stress_scenarios_decide_exactly_as_vllm() -> None:
    proc = _compare("--random", "150", "--seed", "2027", "--stress", "--mode", "all")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "150 scenarios, seed 2027: 0 mismatching" in proc.stdout
