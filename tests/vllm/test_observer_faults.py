"""The observer never takes down what it observes: a failure injected into each hook's
observation (and into the sender thread's frame building), under vLLM's real scheduler in
both engine loops, leaves every scheduling decision as vLLM takes them unobserved; the
failure is logged once with its traceback, counted, stops observing (hooks pass-through,
sender stopped) and ends the session with the reason; vLLM's own exceptions still reach
the caller unchanged. tools/vllm_fault_drive.py runs the cases, on each release.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.conftest import ROOT
from tests.vllm.venvs import recorded, run_tool

HOOKS = (
    "add_request",
    "preempt",
    "schedule_before",
    "schedule_after",
    "update_before",
    "update_after",
    "frames",
)
FAILED_IN = {
    "add_request": "add_request",
    "preempt": "_preempt_request",
    "schedule_before": "schedule",
    "schedule_after": "schedule",
    "update_before": "update_from_output",
    "update_after": "update_from_output",
    "frames": "frames",
}


def test_a_failing_hook_stops_observing_and_vllm_decides_the_same(
    vllm_release: tuple[str, str], dashboard: tuple[str, str], tmp_path: Path
) -> None:
    _, python = vllm_release
    base, db_url = dashboard
    out = tmp_path / "out"
    scenario = str(ROOT / "scenarios" / "kv_pressure.json")  # arrivals, preemptions
    run_tool(python, base, ["vllm_fault_drive.py", scenario, "--out-dir", str(out)], 300)
    run_tool(python, base, ["vllm_fault_drive.py", scenario, "--async", "--out-dir", str(out)], 300)
    for tag in ("", ".async"):
        for hook in HOOKS:
            case = json.loads((out / f"kv_pressure{tag}.{hook}.json").read_text())
            at = f"{hook}{tag}"
            assert case["identical"] and case["total_preemptions"] > 0, at
            assert case["observer_errors"] == 1 and case["failed_in"] == FAILED_IN[hook], at
            assert case["detached"] and case["sender_stopped"] and case["delivered"], at
            assert case["tracebacks"] == 1 and len(case["logged"]) == 1, at
            assert "no longer observed" in case["logged"][0], at
            frames = recorded(base, db_url, case["session"], case["last_seq"])
            last = frames[-1]
            assert last["type"] == "session" and last["data"]["event"] == "closed", at
            assert last["data"]["reason"] == "observer_error", at
            assert last["data"]["observer_errors"] == 1, at
            session = httpx.get(f"{base}/api/sessions/{case['session']}").json()
            assert session["ended_at"] is not None, at
    # The last case's count reached the dashboard in the sender's stats: /nodes shows it.
    node = next(n for n in httpx.get(f"{base}/api/nodes").json() if n["node"] == "vllm-test")
    assert node["observer_errors"] == 1
    raised = json.loads((out / "vllm_error.json").read_text())
    assert raised["observed"] == raised["plain"] != "nothing"
    assert raised["observer_errors"] == "0"
