"""The reference vLLM venvs tests/vllm run the adapter against, and the tools they run.

One venv per release (tools/setup_vllm_venv.sh RELEASE): 0.20 in <repo>/.venv-vllm (or
BATCHSCOPE_VLLM_PYTHON, or /work/vllm-venv), 0.33 in <repo>/.venv-vllm-033 (or
BATCHSCOPE_VLLM033_PYTHON), 0.34 in <repo>/.venv-vllm-034 (or BATCHSCOPE_VLLM034_PYTHON).
A missing venv skips its tests, except under CI (env CI set), where it fails them.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session

from app.db.queries import iter_frames
from app.db.session import make_engine
from tests.app.nodes.test_ingest import _wait
from tests.conftest import ROOT, TOKEN

RELEASES = ("0.20", "0.33", "0.34")
"""The releases the adapter tests run on; the engine's decisions are checked on every
release in engine.releases.CHECKED (test_conformance)."""
CANDIDATES = {
    "0.20": ("BATCHSCOPE_VLLM_PYTHON", ".venv-vllm", "/work/vllm-venv/bin/python"),
    "0.33": ("BATCHSCOPE_VLLM033_PYTHON", ".venv-vllm-033", None),
    "0.34": ("BATCHSCOPE_VLLM034_PYTHON", ".venv-vllm-034", None),
}


def vllm_python_for(release: str) -> str | None:
    env, venv, fallback = CANDIDATES[release]
    for path in (os.environ.get(env, ""), str(ROOT / venv / "bin" / "python"), fallback or ""):
        if path and Path(path).is_file() and os.access(path, os.X_OK):
            return path
    return None


def require_vllm(release: str) -> str:
    """The release's python, or skip (fail under CI) when its venv is missing."""
    python = vllm_python_for(release)
    if python is None:
        why = f"no vLLM {release} venv (run `tools/setup_vllm_venv.sh {release}`)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return python


def run_tool(python: str, base: str, args: list[str], timeout: float) -> str:
    """Run tools/ARGS[0] under `python`, streaming to the dashboard at `base`; its stdout."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "BATCHSCOPE_URL": base.replace("http://", "ws://") + "/ws/ingest",
        "BATCHSCOPE_TOKEN": TOKEN,
        "BATCHSCOPE_NODE": "vllm-test",
        "VLLM_LOGGING_LEVEL": "ERROR",
    }
    cmd = [python, str(ROOT / "tools" / args[0]), *args[1:]]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def recorded(base: str, db_url: str, session: str, last_seq: int) -> list[dict[str, Any]]:
    """A session's frames as the dashboard recorded them, once all have landed."""
    _wait(lambda: httpx.get(f"{base}/api/sessions/{session}").json()["last_seq"] == last_seq)
    with Session(make_engine(db_url)) as db:
        return [json.loads(text) for _, text in iter_frames(db, session)]


def engine_steps(steps: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """A run's steps as an observer sees them: idle loop turns (nothing scheduled, no
    output applied) call no hook, so they are not steps; their arrivals count for the
    next step. Returns (steps renumbered, old step -> new step)."""
    out: list[dict[str, Any]] = []
    renum: dict[int, int] = {}
    carried: list[str] = []
    for s in steps:
        if not s["scheduled"] and s["updated_step"] is None:
            carried += s["arrived"]
            continue
        renum[s["step"]] = len(out)
        out.append({**s, "step": len(out), "arrived": carried + s["arrived"]})
        carried = []
    for s in out:
        if s["updated_step"] is not None:
            s["updated_step"] = renum[s["updated_step"]]
    return out, renum
