"""Why waiting, on real vLLM nodes: every waiting request of every recorded step has a
reason that vLLM's own decision at that step bears out, in our engine's codes, and where
our engine decides as vLLM did, the very reasons and numbers our engine gives.

The adapter computes the reasons on its sender thread from what the schedule hook copied
(batchscope_vllm.waiting); vLLM's per-step decisions come from the same run
(tools/vllm_adapter_drive.py, shared with test_adapter.py through `adapter_run`).
"""

from __future__ import annotations

import json
from typing import Any

from batchscope_vllm import waiting as adapter
from engine import waiting_reasons
from engine.events import IterationEvent, ListSink
from engine.scenario import parse_scenario
from engine.simulate import run_scenario
from protocol.codes import HEAD_GATES
from tests.vllm.conftest import AdapterRun
from tests.vllm.venvs import engine_steps, recorded

SHARED: tuple[str, ...] = ("TOKEN_BUDGET", "MAX_NUM_SEQS", "KV_BLOCKS", "POLICY_ORDER")
SHARED += ("PREEMPTION_THIS_STEP", "NO_CHUNKING_FIT", "PAUSED", "MAX_NUM_ACTIVE_SEQS")
SHARED += ("KV_WATERMARK", "PREFILL_THROTTLED")
VLLM_ONLY = (
    adapter.STRUCTURED_OUTPUT,
    adapter.REMOTE_KV,
    adapter.STREAMING_INPUT,
    adapter.LORA_LIMIT,
    adapter.OUTPUT_IN_FLIGHT,
)
CODES = {getattr(adapter, c) for c in SHARED} | set(VLLM_ONLY)


def test_the_adapter_speaks_our_engines_codes() -> None:
    for name in SHARED:
        assert getattr(adapter, name) == getattr(waiting_reasons, name)
    ours = {v for k, v in vars(waiting_reasons).items() if k.isupper() and isinstance(v, str)}
    assert not set(VLLM_ONLY) & ours  # a gate only vLLM has gets a code of its own


def _run(run: AdapterRun, name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(vLLM's steps as the observer numbers them, the recorded iteration frames)."""
    result = json.loads((run.out_dir / f"{name}.json").read_text())
    obs = result["observer"]
    frames = recorded(run.base, run.db_url, obs["session"], obs["last_seq"])
    steps, _ = engine_steps(result["steps"])
    return steps, [f["data"] for f in frames if f["type"] == "iteration"]


def _check_step(want: dict[str, Any], it: dict[str, Any], usable: int) -> set[str]:
    """The reasons of one step against what vLLM did in it; returns the codes seen."""
    at = f"step {want['step']}"
    reasons, d = it["waiting_reasons"], it.get("waiting_detail") or {}
    assert len(reasons) == want["num_waiting"] == it["queues"]["waiting"], at
    codes = set(reasons.values())
    assert codes <= CODES, at
    if not reasons:
        return codes
    assert d["gate"] in codes and d["head"] in reasons, at
    gate = d["gate"]
    if adapter.POLICY_ORDER in codes:
        assert gate in HEAD_GATES and reasons[d["head"]] == gate, at
    if gate == adapter.PREEMPTION_THIS_STEP:
        assert want["preempted_req_ids"] and d["num_preempted"] == len(want["preempted_req_ids"])
    elif gate == adapter.TOKEN_BUDGET:
        assert d["budget_used"] == sum(want["scheduled"].values()) == it["budget"]["used"], at
    elif gate in (adapter.MAX_NUM_SEQS, adapter.MAX_NUM_ACTIVE_SEQS):
        limit = d["max_num_seqs" if gate == adapter.MAX_NUM_SEQS else "max_num_active_seqs"]
        assert want["num_running"] == d["num_running"] >= limit, at
        if gate == adapter.MAX_NUM_ACTIVE_SEQS:
            assert limit < d["max_num_seqs"], at
    elif gate in (adapter.KV_BLOCKS, adapter.KV_WATERMARK):
        # An upper bound (no prefix-cache hits): above what was free, as vLLM found, or
        # within it and held by the watermark.
        assert d["blocks_free"] == usable - want["kv_blocks_used"], at
        room = d["blocks_free"] - d.get("watermark_blocks", 0)
        assert d["blocks_needed"] > (room if gate == adapter.KV_BLOCKS else 0), at
        if gate == adapter.KV_WATERMARK:
            assert room < d["blocks_needed"] <= d["blocks_free"], at
    elif gate == adapter.PREFILL_THROTTLED:
        assert not want["new_req_ids"] and not want["resumed_req_ids"], at
        assert all(r["phase"] == "decode" for r in it["scheduled"]), at
    if not want["preempted_req_ids"]:
        assert adapter.PREEMPTION_THIS_STEP not in codes, at
    return codes


def test_every_waiting_request_has_the_reason_vllm_bears_out(adapter_run: AdapterRun) -> None:
    run = adapter_run
    seen: set[str] = set()
    watermark = False
    for name in run.names:
        steps, its = _run(run, name)
        usable = json.loads(run.paths[name].read_text())["config"]["num_gpu_blocks"] - 1
        assert len(steps) == len(its), name
        for want, it in zip(steps, its, strict=True):
            seen |= _check_step(want, it, usable)
            watermark |= "watermark_blocks" in (it.get("waiting_detail") or {})
    assert {"token_budget", "kv_blocks", "policy_order", "preemption_this_step"} <= seen
    if run.release == "0.33":  # the later knobs' gates, on the release that has them
        assert {"prefill_throttled", "max_num_active_seqs"} <= seen and watermark


def _ours(run: AdapterRun, name: str) -> list[dict[str, Any]]:
    """Our engine's steps (observer numbering) on the same scenario, deciding as the same
    release, with the details."""
    data = json.loads(run.paths[name].read_text())
    data["config"]["vllm_version"] = run.release
    if name.endswith(".async"):
        data["config"]["async_scheduling"] = True
    sink = ListSink()
    result = run_scenario(parse_scenario(data), sink=sink)
    details = [e.waiting_detail for e in sink.events if isinstance(e, IterationEvent)]
    for rec, detail in zip(result["steps"], details, strict=True):
        rec["waiting_detail"] = dict(detail)
    steps, renum = engine_steps(result["steps"])
    for old, new in renum.items():  # `until_step` counts steps as the frames number them
        detail = steps[new]["waiting_detail"]
        if "until_step" in detail:
            detail["until_step"] -= old - new
    return steps


def _comparable(reasons: dict[str, str]) -> dict[str, str]:
    """Reasons without the requests vLLM skips for an output still in flight (our engine
    skips them too, without a code of their own: they get the step's gate)."""
    return {r: c for r, c in reasons.items() if c != adapter.OUTPUT_IN_FLIGHT}


def test_reasons_equal_our_engines_where_it_decides_as_vllm(adapter_run: AdapterRun) -> None:
    """Two independent derivations: our engine records each gate as it closes; the
    adapter replays vLLM's loop over the queues it copied. On the steps where the two
    schedulers have decided alike so far, they must give the same reasons and numbers;
    our engine decides as the release does, so that is every step."""
    run = adapter_run
    for name in run.names:
        vllm_steps, its = _run(run, name)
        ours = _ours(run, name)
        agreed = 0
        for want, mine, it in zip(vllm_steps, ours, its, strict=False):
            same = (want["scheduled"], want["preempted_req_ids"]) == (
                mine["scheduled"],
                mine["preempted_req_ids"],
            )
            if not same:
                break
            at = (name, want["step"])
            reasons = _comparable(it["waiting_reasons"])
            assert reasons == {r: mine["waiting_reasons"][r] for r in reasons}, at
            if reasons == it["waiting_reasons"]:
                assert (it.get("waiting_detail") or {}) == mine["waiting_detail"], at
            agreed += 1
        # Our engine decides as each supported release (tests/vllm/test_conformance.py).
        assert agreed == len(vllm_steps) == len(ours), name
