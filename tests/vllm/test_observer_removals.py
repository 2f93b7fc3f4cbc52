"""A vLLM release cannot break the observer: each vLLM attribute the adapter reads is taken
away in turn (tools/vllm_removal_drive.py: in the vLLM process, as batchscope_vllm sees it),
under vLLM's real scheduler in both engine loops. vLLM decides exactly as unobserved; the
observation that needs the attribute is skipped, named and counted (compat.Degraded: in
the sender's stats, shown on /api/nodes, and in the session's closing frame) and the rest is
observed: every step's iteration frame and every request's finish still arrive. A field of
vLLM's dataclasses that speculative decoding's observations read is found missing at start:
the announce (the session's metadata) names those observations from the first frame. Only an
attribute nothing can be observed without (a request's id) stops observing, counted as an
observer error, while vLLM serves on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ROOT
from tests.vllm.venvs import recorded, run_tool

KV_REMOVALS = {
    # attribute taken away -> the observations that degrade without it
    "Request.prompt_token_ids": {"prompt_block_hashes"},
    "Request.num_computed_tokens": {"tokens_lost", "waiting_reasons"},
    "Request.status": {"waiting_reasons"},
    "BlockPool.get_num_free_blocks": {"kv_usage"},
    "CachedRequestData.resumed_req_ids": set(),  # (a preempted request's mark tells)
}
SPEC_REMOVALS = {
    "ModelRunnerOutput.sampled_token_ids": {"draft_acceptance"},
    "ModelRunnerOutput.req_id_to_index": set(),  # (req_ids tell the same)
    "SchedulerOutput.scheduled_spec_decode_tokens": {"drafts"},
}
FATAL = "Request.request_id"
"""Without a request's id nothing about it can be told: observing stops, vLLM serves on."""


def _case(out: Path, stem: str, spec: str) -> dict[str, Any]:
    return json.loads((out / f"{stem}.{spec}.json").read_text())  # type: ignore[no-any-return]


def _check_observed(
    base: str, db_url: str, case: dict[str, Any], want: set[str], at_start: bool = False
) -> None:
    """`at_start`: the adapter finds `want` missing before the first step (a dataclass
    field it probes): the announce, so the session's metadata, names it already."""
    at = case["removed"] + (" async" if case["async"] else "")
    assert case["identical"], at
    assert case["observer_errors"] == 0 and case["failed_in"] is None, at
    assert case["delivered"], at
    assert set(case["degraded"]) == want and all(n > 0 for n in case["degraded"].values()), at
    frames = recorded(base, db_url, case["session"], case["last_seq"])
    opened = frames[0]["data"]
    assert opened["event"] == "opened", at
    assert opened["degraded"] == (dict.fromkeys(want, 0) if at_start else {}), at
    iterations = [f["data"] for f in frames if f["type"] == "iteration"]
    assert len(iterations) == case["num_steps"], at  # every step observed
    finished = {r["req"] for it in iterations for r in it["finished"]}
    assert len(finished) == case["num_requests"], at
    marks = [f["data"] for f in frames if f["type"] == "request"]
    hashed = [m for m in marks if m["kind"] == "arrived" and m["detail"].get("prompt_block_hashes")]
    if "prompt_block_hashes" in want:
        assert not hashed, at
    else:
        assert len(hashed) == case["num_requests"], at
    if "kv_usage" not in want:
        assert any(it["kv"]["used"] > 0 for it in iterations), at
    if "waiting_reasons" not in want and case["total_preemptions"]:
        assert any(it.get("waiting_reasons") for it in iterations), at
    last = frames[-1]
    assert last["type"] == "session" and last["data"]["event"] == "closed", at
    assert last["data"]["reason"] == "shutdown", at
    assert last["data"]["degraded"] == case["degraded"], at


def test_each_removed_attribute_degrades_one_observation_and_vllm_serves_on(
    vllm_release: tuple[str, str], dashboard: tuple[str, str], tmp_path: Path
) -> None:
    release, python = vllm_release
    base, db_url = dashboard
    out = tmp_path / "out"
    kv = str(ROOT / "scenarios" / "kv_pressure.json")  # arrivals, preemptions, waiting
    spec = str(ROOT / "scenarios" / "spec_decode.json")  # drafts verified each step
    removals = {**KV_REMOVALS, FATAL: set()}
    if release == "0.34":  # (no req_id_to_index: req_ids are the only way to a row)
        spec_removals = {**SPEC_REMOVALS, "ModelRunnerOutput.req_ids": {"draft_acceptance"}}
    else:
        spec_removals = {**SPEC_REMOVALS, "ModelRunnerOutput.req_ids": set()}
    drive = ["vllm_removal_drive.py", "--out-dir", str(out), "--remove"]
    run_tool(python, base, [*drive, *removals, "--", kv], 400)
    run_tool(python, base, [*drive, *spec_removals, "--", spec], 400)
    async_removals = ["Request.num_computed_tokens", "BlockPool.get_num_free_blocks"]
    run_tool(python, base, [*drive, *async_removals, "--async", "--", kv], 400)
    for removal, want in KV_REMOVALS.items():
        _check_observed(base, db_url, _case(out, "kv_pressure", removal), want)
    for removal in async_removals:
        case = _case(out, "kv_pressure.async", removal)
        _check_observed(base, db_url, case, KV_REMOVALS[removal])
    for removal, want in spec_removals.items():
        case = _case(out, "spec_decode", removal)
        _check_observed(base, db_url, case, want, at_start=True)
        frames = recorded(base, db_url, case["session"], case["last_seq"])
        accepted = [f["data"].get("accepted") for f in frames if f["type"] == "iteration"]
        assert any(accepted) == (not want), removal  # drafts verified, unless degraded
    fatal = _case(out, "kv_pressure", FATAL)
    assert fatal["identical"] and fatal["observer_errors"] == 1, fatal
    assert fatal["failed_in"] == "add_request", fatal
    # The last case's counts reached the dashboard in the sender's stats: /nodes shows them.
    node = next(n for n in httpx.get(f"{base}/api/nodes").json() if n["node"] == "vllm-test")
    assert node["degraded"] == _case(out, "kv_pressure.async", async_removals[-1])["degraded"]
