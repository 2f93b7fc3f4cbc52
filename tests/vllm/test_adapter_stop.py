"""A vLLM node stopped with requests in flight: vLLM's engine core aborts every request it
still holds (FINISHED_ABORTED), and the recording shows each of them finished with reason
`abort` at the last step, with its finish time and E2E, in the live fold and in the
recorded table alike; requests that finished before keep their reasons.

tools/vllm_stop_drive.py stops vLLM's real scheduler (each reference release) after a few
steps of kv_pressure, in both of the adapter's stop paths (the stop signal's handler and
the scheduler's shutdown()), through vLLM's Scheduler and its AsyncScheduler.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ROOT
from tests.vllm.venvs import recorded, run_tool

STEPS = 14
"""kv_pressure after 14 steps: 5 requests running and one preempted, waiting."""
CASES = ("signal", "shutdown", "shutdown.async")
LATE = "late"


def _check_case(base: str, db_url: str, case: dict[str, Any]) -> None:
    at = case["case"]
    held = case["held"]
    assert held["running"] and held["waiting"], at
    assert LATE in held["waiting"], at
    aborted = set(case["aborted"])
    # What vLLM aborted is what it held (the observer changed nothing).
    assert aborted == set(held["running"]) | set(held["waiting"]), at
    assert case["delivered"], at
    frames = recorded(base, db_url, case["session"], case["last_seq"])
    last = frames[-1]
    assert (last["type"], last["data"]["event"], last["data"]["reason"]) == (
        "session",
        "closed",
        "shutdown",
    ), at
    its = [f for f in frames if f["type"] == "iteration"]
    last_step = its[-1]["data"]["step"]
    marks = [f for f in frames if f["type"] == "request" and f["data"]["kind"] == "aborted"]
    # One abort mark per request vLLM aborted, after the last step, before the closing mark.
    assert sorted(m["data"]["req"] for m in marks) == sorted(aborted), at
    assert all(m["seq"] > its[-1]["seq"] for m in marks), at
    for m in marks:
        d = m["data"]
        assert (d["step"], d["detail"]["reason"]) == (last_step, "abort"), (at, d)
    # The live fold (the session's state) and the recorded table agree.
    state = httpx.get(f"{base}/api/sessions/{case['session']}/state", timeout=30).json()
    rows = {r["req"]: r for r in state["requests"]}
    table = httpx.get(
        f"{base}/api/sessions/{case['session']}/requests",
        params={"limit": 500},
        timeout=30,
    ).json()
    recorded_rows = {r["req"]: r for r in table}
    for req in aborted:
        row = rows[req]
        assert (row["status"], row["finish_reason"]) == ("FINISHED", "abort"), (at, row)
        assert row["finish_t"] is not None and row["finish_t"] >= row["arrived_t"], (at, row)
        done = recorded_rows[req]
        assert (done["status"], done["finish_reason"]) == ("FINISHED", "abort"), (at, done)
        assert done["e2e"] is not None and done["e2e"] >= 0, (at, done)
        assert done["finish_t"] == row["finish_t"], at
    # The life of the request that arrived after the last step, aborted there.
    life = httpx.get(
        f"{base}/api/requests/{LATE}", params={"session": case["session"]}, timeout=30
    ).json()
    assert life["status"] == "FINISHED", (at, life)
    assert life["latency"]["e2e"] is not None, (at, life)
    others = {r for r, row in rows.items() if r not in aborted}
    for req in others:  # finished by vLLM before the stop, as vLLM said
        assert rows[req]["status"] == "FINISHED", at
        assert rows[req]["finish_reason"] in ("length", "stop"), (at, rows[req])


def test_a_stop_records_what_vllm_aborted(
    vllm_release: tuple[str, str], dashboard: tuple[str, str], tmp_path: Path
) -> None:
    _, python = vllm_release
    base, db_url = dashboard
    out = tmp_path / "out"
    scenario = str(ROOT / "scenarios" / "kv_pressure.json")
    args = ["vllm_stop_drive.py", scenario, "--steps", str(STEPS), "--out-dir", str(out)]
    run_tool(python, base, args, 300)
    for name in CASES:
        case = json.loads((out / f"{name}.json").read_text())
        if name == "signal":
            assert case["signalled"], "the handler in place did not run"
        if name.endswith(".async"):
            assert case["in_flight_batches"] > 0, "no batch in flight at the stop"
        _check_case(base, db_url, case)
