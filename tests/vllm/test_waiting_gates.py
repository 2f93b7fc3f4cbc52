"""Waiting gates no scenario file reaches, on vLLM's real scheduler of each release: a
request vLLM holds for its structured-output grammar (its own status) keeps that reason
while the others wait for the sequence limit, and while vLLM is paused the rest wait as
`paused` (tools/vllm_gates_drive.py drives it)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.conftest import ROOT


def test_grammar_and_pause_gates_on_vllms_scheduler(
    vllm_release: tuple[str, str], tmp_path: Path
) -> None:
    _, python = vllm_release
    out = tmp_path / "gates.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_LOGGING_LEVEL": "ERROR"}
    cmd = [python, str(ROOT / "tools" / "vllm_gates_drive.py"), "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    grammar = result["structured"]
    assert result["structured_status"] == "WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR"
    assert result["observer_errors"] == 0
    paused = set(result["paused_steps"])
    its = result["iterations"]
    assert [it["step"] for it in its] == list(range(len(its))) and len(its) > max(paused)
    for it in its:
        reasons, detail = it["waiting_reasons"], it["waiting_detail"]
        at = f"step {it['step']}"
        assert reasons[grammar] == "structured_output", at  # vLLM skips it every step
        others = {r: c for r, c in reasons.items() if r != grammar}
        assert others, at
        if it["step"] in paused:
            assert not it["scheduled"] and set(others.values()) == {"paused"}, at
            assert detail["gate"] == "paused", at
        else:
            assert len(it["scheduled"]) == 2 and set(others.values()) == {"max_num_seqs"}, at
            assert (detail["gate"], detail["max_num_seqs"], detail["num_running"]) == (
                "max_num_seqs",
                2,
                2,
            ), at
        assert detail["head"] in others, at
