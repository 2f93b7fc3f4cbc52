"""The vLLM adapter for real: vLLM 0.20.0's own Scheduler, subclassed by
batchscope_vllm.ObservedScheduler, streams scenarios into a `serve --no-engine` dashboard,
and the recorded sessions must equal what vLLM decided at every step.

vLLM lives in its own venv (tools/setup_vllm_venv.sh): BATCHSCOPE_VLLM_PYTHON, else
<repo>/.venv-vllm/bin/python, else /work/vllm-venv/bin/python. Without one the test skips,
except under CI (env CI set), where it fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session

from app.db.queries import iter_frames
from app.db.session import make_engine
from batchscope_vllm.sender import REFUSAL, Sender
from tests.app.nodes.test_ingest import _serve, _stop, _wait
from tests.conftest import ROOT, TOKEN, free_port

SCENARIOS = ("kv_pressure", "shared_prefixes", "priority", "spec_decode")
# Through vLLM's AsyncScheduler and the batch-queue loop (two batches in flight).
ASYNC_SCENARIOS = ("kv_pressure", "async_placeholders")


def _vllm_python() -> str | None:
    candidates = [
        os.environ.get("BATCHSCOPE_VLLM_PYTHON", ""),
        str(ROOT / ".venv-vllm" / "bin" / "python"),
        "/work/vllm-venv/bin/python",
    ]
    for path in candidates:
        if path and Path(path).is_file() and os.access(path, os.X_OK):
            return path
    return None


@pytest.fixture
def vllm_python() -> str:
    python = _vllm_python()
    if python is None:
        why = "no vLLM venv (run tools/setup_vllm_venv.sh or set BATCHSCOPE_VLLM_PYTHON)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return python


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(base URL, database URL) of a live `serve --no-engine` dashboard."""
    db_url = f"sqlite:///{tmp_path / 'dash.db'}"
    upgrade = [sys.executable, "-m", "app.cli", "db", "upgrade", "--database-url", db_url]
    subprocess.run(upgrade, cwd=ROOT, check=True, capture_output=True)
    port = free_port()
    proc = _serve(port, db_url)
    try:
        yield f"http://127.0.0.1:{port}", db_url
    finally:
        _stop(proc)


def _drive(python: str, base: str, out_dir: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "BATCHSCOPE_URL": base.replace("http://", "ws://") + "/ws/ingest",
        "BATCHSCOPE_TOKEN": TOKEN,
        "BATCHSCOPE_NODE": "vllm-test",
    }
    cmd = [python, str(ROOT / "tools" / "vllm_adapter_drive.py")]
    cmd += [str(ROOT / "scenarios" / f"{s}.json") for s in SCENARIOS]
    cmd += ["--async-scenarios", *(str(ROOT / "scenarios" / f"{s}.json") for s in ASYNC_SCENARIOS)]
    cmd += ["--out-dir", str(out_dir)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _recorded(base: str, db_url: str, obs: dict[str, Any]) -> list[dict[str, Any]]:
    """The session's frames as the dashboard recorded them, once all have landed."""
    sid = obs["session"]
    _wait(lambda: httpx.get(f"{base}/api/sessions/{sid}").json()["last_seq"] == obs["last_seq"])
    with Session(make_engine(db_url)) as db:
        return [json.loads(text) for _, text in iter_frames(db, sid)]


def _engine_steps(steps: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """The reference's steps as an observer sees them: idle loop turns (nothing scheduled,
    no output applied) call no hook, so they are not steps; their arrivals count for the
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


def _check_steps(steps: list[dict[str, Any]], its: list[dict[str, Any]]) -> None:
    assert [it["step"] for it in its] == [s["step"] for s in steps]
    computed: dict[str, int] = {}
    sampling: dict[int, set[str]] = {}
    drafts: dict[int, dict[str, int]] = {}
    for want, it in zip(steps, its, strict=True):
        at = f"step {want['step']}"
        assert [(i["req"], i["n"]) for i in it["scheduled"]] == list(want["scheduled"].items()), at
        assert [p["req"] for p in it["preempted"]] == want["preempted_req_ids"], at
        assert [f["req"] for f in it["finished"]] == want["finished_req_ids"], at
        assert it["new"] == want["new_req_ids"] and it["resumed"] == want["resumed_req_ids"], at
        assert it["arrived"] == want["arrived"] and it["sampled"] == want["sampled_req_ids"], at
        assert it["updated_step"] == want["updated_step"], at
        q = it["queues"]
        assert (q["running"], q["waiting"]) == (want["num_running"], want["num_waiting"]), at
        assert (q["running_end"], q["waiting_end"]) == (
            want["num_running_end"],
            want["num_waiting_end"],
        ), at
        assert it["kv"]["used"] == want["kv_blocks_used"], at
        assert it["kv"]["used_end"] == want["kv_blocks_used_end"], at
        spec = {i["req"]: i["spec"] for i in it["scheduled"] if i.get("spec")}
        assert spec == want["scheduled_spec_tokens"], at
        assert it.get("accepted", {}) == want["accepted_tokens"], at
        admitted = set(it["new"]) | set(it["resumed"])
        hits = {i["req"]: i["prefix_hit"] for i in it["scheduled"] if i["req"] in admitted}
        assert hits == want["prefix_cache_hit_tokens"], at
        sampling[want["step"]] = {i["req"] for i in it["scheduled"] if i["sample"]}
        drafts[want["step"]] = spec
        # A step schedules first (preempting), then applies an output.
        for p in it["preempted"]:
            assert p["tokens_lost"] == computed.pop(p["req"], 0), at
        for i in it["scheduled"]:  # `start` follows vLLM's num_computed_tokens
            assert i["start"] == (i["prefix_hit"] if i["req"] in admitted else computed[i["req"]])
            computed[i["req"]] = i["start"] + i["n"]
        if it["updated_step"] is not None:
            # The batch this step applied sampled exactly its sampling rows' requests
            # (bar those finished or aborted meanwhile); rejected drafts roll back.
            assert set(it["sampled"]) <= sampling.pop(it["updated_step"]), at
            for req, accepted in it.get("accepted", {}).items():
                if req in computed:
                    computed[req] -= drafts[it["updated_step"]][req] - accepted


def _check_requests(
    base: str, sid: str, want: dict[str, dict[str, Any]], renum: dict[int, int]
) -> None:
    rows = {r["req"]: r for r in httpx.get(f"{base}/api/sessions/{sid}/state").json()["requests"]}
    assert set(rows) == set(want)
    for req, rec in want.items():
        row = rows[req]
        assert row["status"] == "FINISHED" and row["finish_reason"] == rec["finish_reason"]
        assert row["finish_step"] == renum[rec["finish_step"]]
        assert row["first_scheduled_step"] == renum[rec["first_scheduled_step"]]
        assert row["num_preemptions"] == rec["num_preemptions"]
        assert row["first_token_t"] is not None and row["num_tokens"] == (
            rec["num_prompt_tokens"] + rec["num_output_tokens"]
        )


def test_recorded_sessions_equal_what_vllm_decided(
    vllm_python: str, dashboard: tuple[str, str], tmp_path: Path
) -> None:
    base, db_url = dashboard
    out_dir = tmp_path / "out"
    _drive(vllm_python, base, out_dir)
    names = [*SCENARIOS, *(f"{s}.async" for s in ASYNC_SCENARIOS)]
    for name in names:
        result = json.loads((out_dir / f"{name}.json").read_text())
        obs = result["observer"]
        assert obs["delivered"] and obs["dropped"] == 0 and obs["errors"] == 0, name
        frames = _recorded(base, db_url, obs)
        assert [f["seq"] for f in frames] == list(range(1, obs["last_seq"] + 1))
        opened = frames[0]["data"]
        assert (opened["event"], opened["engine"], opened["runner"]) == ("opened", "vllm", "vllm")
        its = [f["data"] for f in frames if f["type"] == "iteration"]
        steps, renum = _engine_steps(result["steps"])
        _check_steps(steps, its)
        state = httpx.get(f"{base}/api/sessions/{obs['session']}/state").json()
        plans = [list(h["plan"].items()) for h in state["history"]]
        assert plans == [list(s["scheduled"].items()) for s in steps], name
        assert state["meta"]["source"] == "node:vllm-test"
        assert state["meta"]["config"]["async_scheduling"] is name.endswith(".async"), name
        _check_requests(base, obs["session"], result["requests"], renum)
        if name == "spec_decode":
            assert result["total_accepted_tokens"] > 0
            rows = {r["req"]: r for r in state["requests"]}
            assert (
                sum(r["num_accepted_tokens"] for r in rows.values())
                == (result["total_accepted_tokens"])
            )
    assert sum(json.loads((out_dir / f"{n}.json").read_text())["total_preemptions"] for n in names)


def test_sender_reconnects_resends_and_refuses_control(tmp_path: Path) -> None:
    """The sender side alone (no vLLM needed): it starts before the dashboard exists,
    connects once it is up, delivers its opened mark, and refuses control commands."""
    port = free_port()
    db_url = f"sqlite:///{tmp_path / 'dash.db'}"
    upgrade = [sys.executable, "-m", "app.cli", "db", "upgrade", "--database-url", db_url]
    subprocess.run(upgrade, cwd=ROOT, check=True, capture_output=True)
    sender = Sender(
        url=f"ws://127.0.0.1:{port}/ws/ingest",
        token=TOKEN,
        node="lonely",
        announce={"name": "lonely", "engine": "vllm", "runner": "vllm", "model": "m", "config": {}},
        max_tokens=64,
        max_seqs=4,
        total_blocks=10,
    )
    sender.start()
    time.sleep(0.5)  # nobody listening yet: it buffers and retries
    dash = _serve(port, db_url)
    base = f"http://127.0.0.1:{port}"
    try:
        node = _wait(
            lambda: next(
                n
                for n in httpx.get(base + "/api/nodes").json()
                if n["state"] == "live" and n["last_seq"] >= 1
            )
        )
        assert node["session"] == sender.session and node["last_seq"] == 1
        auth = {"Authorization": f"Bearer {TOKEN}"}
        r = httpx.post(base + "/api/config", headers=auth, json={"max_num_seqs": 2})
        assert r.status_code == 422 and REFUSAL in r.text
        assert sender.close(5.0)
    finally:
        sender.close(1.0)
        _stop(dash)
