"""The adapter in the own engine loops of each release with a reference venv (0.20, 0.33 and
0.34; their decisions: test_conformance.py): installed by class name in `EngineCore.step`
and `EngineCore.step_with_batch_queue`, speculative decoding in both, every frame equal to
vLLM's decision and a failure in each observer hook harmless (tools/vllm_release_check.py
--inner, tools/vllm_engine_drive.py). The releases in between: test_release_matrix.py."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import ROOT
from tests.vllm.venvs import RELEASES, require_vllm


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
