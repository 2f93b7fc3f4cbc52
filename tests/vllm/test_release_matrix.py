"""The release matrix in CI for releases without a venv of their own (0.24, 0.28): vLLM's
wheel unpacked onto the 0.20 reference venv, our engine deciding as that release, step by
step on the shipped scenarios and generated traces in every engine loop, and the adapter
on that release's own scheduler (tools/vllm_matrix.py; docs/vllm_releases.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.vllm.venvs import require_vllm


@pytest.mark.parametrize("release", ["0.24", "0.28"])
def test_a_release_in_between_decides_as_vllm_itself(release: str) -> None:
    require_vllm("0.20")  # the venv that lends the unpacked release its dependencies
    proc = subprocess.run(
        [sys.executable, "tools/vllm_matrix.py", release, "--random", "20"],
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
        assert same == total >= 20, row[0]
    assert adapter == "ok", row[0]
