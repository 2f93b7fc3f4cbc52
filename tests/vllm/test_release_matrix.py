"""The release matrix in CI (tools/vllm_matrix.py; docs/vllm_releases.md): 0.24 and 0.28,
releases without a venv of their own: vLLM's wheel unpacked onto the 0.20 reference venv,
our engine deciding as that release, step by step on the shipped scenarios and on random
and stress traces in every engine loop, and the adapter in that release's own engine
loops. The releases with a venv: test_release_loops.py (the adapter) and
test_conformance.py (the decisions)."""

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
