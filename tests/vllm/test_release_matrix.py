"""The release matrix in CI (tools/vllm_matrix.py; docs/vllm_releases.md).

- 0.24 and 0.28, releases without a venv of their own: vLLM's wheel unpacked onto the 0.20
  reference venv, our engine deciding as that release, step by step on the shipped
  scenarios and on random and stress traces in every engine loop, and the adapter in that
  release's own engine loops.
- 0.20, 0.33 and 0.34 (their decisions: test_conformance.py): the adapter installed by
  class name in each one's own `EngineCore.step` and `EngineCore.step_with_batch_queue`,
  speculative decoding in both, every frame equal to vLLM's decision and a failure in each
  observer hook harmless (tools/vllm_release_check.py --inner,
  tools/vllm_engine_drive.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.vllm.venvs import RELEASES, require_vllm


@pytest.mark.parametrize("release", ["0.24", "0.28"])
def test_a_release_in_between_decides_as_vllm_itself(release: str) -> None:
    require_vllm("0.20")  # the venv that lends the unpacked release its dependencies
    proc = subprocess.run(
        [sys.executable, "tools/vllm_matrix.py", release, "--random", "20", "--stress", "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row = [line for line in proc.stdout.splitlines() if line.startswith(f"| {release} |")]
    assert len(row) == 1, proc.stdout
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    sync, async_, spec, adapter = cells[2:6]
    for loop in (sync, async_, spec):
        same, total = (int(x) for x in loop.split(" / "))
        assert same == total >= 25, row[0]
    assert adapter == "ok", row[0]


@pytest.mark.parametrize("release", RELEASES)
def test_the_adapter_in_the_release_own_engine_loops(release: str) -> None:
    python = require_vllm(release)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_LOGGING_LEVEL": "ERROR"}
    proc = subprocess.run(
        [python, "tools/vllm_release_check.py", "--inner"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    verdict = [line for line in proc.stdout.splitlines() if line.startswith("vLLM ")]
    assert proc.returncode == 0 and verdict, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert verdict[-1] == f"vLLM {release}.0: 16 engine-loop runs, 14 fault cases: ok"
