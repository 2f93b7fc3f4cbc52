"""Our scheduler against vLLM's own, release by release (every release in
engine.releases.CHECKED: 0.20.0, 0.33.0 and 0.34.0, each in its venv; the engine runs with
the same `vllm_version`), step by step, on the shipped scenarios and on random ones
(budgets, chunking, thresholds, KV pressure and preemption, prefix caching with shared and
resumed prefixes, FCFS and priority, reserve_full_isl on and off; on 0.33 and 0.34 also
the later knobs max_num_active_seqs, watermark, prefill_schedule_interval),
in every engine loop: sync `Scheduler`, `AsyncScheduler` behind the batch queue of 2, and
the sync `Scheduler` with n-gram drafts (random scenarios take the three loops in turn)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine.releases import CHECKED, knob_available
from tests.conftest import ROOT
from tests.vllm.venvs import require_vllm

SCENARIOS = sorted(str(p) for p in (ROOT / "scenarios").glob("*.json"))


def _compare(release: str, *args: str) -> subprocess.CompletedProcess[str]:
    python = require_vllm(release)
    return subprocess.run(
        [
            sys.executable,
            "tools/compare_scenario.py",
            "--vllm-python",
            python,
            "--vllm-version",
            release,
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.parametrize("release", CHECKED)
def test_shipped_scenarios_decide_exactly_as_vllm(release: str) -> None:
    proc = _compare(release, *SCENARIOS)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("identical") == len(SCENARIOS)


@pytest.mark.parametrize("release", CHECKED)
def test_a_run_stops_where_vllms_scheduler_fails(release: str) -> None:
    # K = 4 and threshold 4, which vLLM accepts: 0.33 fails an assertion at step 3 (a padded
    # decode cut by the threshold), 0.20 runs on. Ours must stop (or not) at the same step.
    fault = ROOT / "tests" / "engine" / "spec_threshold_fault.json"
    proc = _compare(release, str(fault))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = "31 steps" if release == "0.20" else "3 steps"
    assert f"identical ({steps}" in proc.stdout


@pytest.mark.parametrize(
    "release", [r for r in CHECKED if knob_available("cache_aware_admission_window", r)]
)
def test_cache_aware_admission_reorders_as_vllm(release: str) -> None:
    # C (32 cached prompt tokens) is admitted ahead of B, which arrived first (0.34+).
    proc = _compare(release, str(ROOT / "tests" / "engine" / "cache_aware_admission.json"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "identical (13 steps" in proc.stdout


RANDOM = [
    (release, n, seed, extra)
    for release in CHECKED
    for n, seed, extra in [(300, 2026, ()), (150, 2027, ("--stress",))]
] + [
    (release, n, seed, extra)
    for release in CHECKED[1:]
    for n, seed, extra in [(300, 11, ("--new-knobs",)), (150, 12, ("--stress", "--new-knobs"))]
]


@pytest.mark.parametrize(("release", "n", "seed", "extra"), RANDOM)
def test_random_scenarios_decide_exactly_as_vllm(
    release: str, n: int, seed: int, extra: tuple[str, ...]
) -> None:
    proc = _compare(release, "--random", str(n), "--seed", str(seed), *extra, "--mode", "all")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"{n} scenarios, seed {seed}: 0 mismatching" in proc.stdout
