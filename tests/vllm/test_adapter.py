"""The vLLM adapter for real, on every reference release (0.20, 0.33 and 0.34): vLLM's own
Scheduler, subclassed by batchscope_vllm.ObservedScheduler, streams scenarios into a
`serve --no-engine` dashboard, and the recorded sessions must equal what vLLM decided at
every step, announce the node's release and loop, and end when the scheduler shuts down.

vLLM lives in its own venvs (tools/setup_vllm_venv.sh; tests/vllm/venvs.py finds them);
without one the release's tests skip, except under CI (env CI set), where they fail.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx

from app.records.importer import import_jsonl
from app.records.mooncake import mooncake_lines
from batchscope_vllm.sender import Sender
from batchscope_vllm.stop import chain_stop_signals
from tests.app.nodes.test_ingest import _wait
from tests.app.records.conftest import NewUrl, open_sessions
from tests.conftest import TOKEN, free_port
from tests.vllm.conftest import DASHBOARD_START_S, PREFIX_SCENARIO, AdapterRun
from tests.vllm.venvs import engine_steps, recorded
from tests.vllm_node.observed import start_dashboard


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


def _check_announce(run: AdapterRun, name: str, opened: dict[str, Any]) -> None:
    assert (opened["event"], opened["engine"], opened["runner"]) == ("opened", "vllm", "vllm")
    assert opened["vllm_version"].startswith(run.release + "."), opened["vllm_version"]
    loop = "async" if name.endswith(".async") else "sync"
    if name.startswith("spec_decode"):
        loop += "+spec"
    assert opened["engine_loop"] == loop
    want_class = "AsyncScheduler" if loop.startswith("async") else "Scheduler"
    assert opened["scheduler_class"].rsplit(".", 1)[-1] == want_class
    config = opened["config"]
    later = ("max_num_active_seqs", "watermark", "prefill_schedule_interval")
    if run.release == "0.20":
        assert config["max_num_partial_prefills"] == 1 and not set(later) & set(config)
    else:  # gone by 0.33, which has the later knobs instead
        assert "max_num_partial_prefills" not in config and set(later) <= set(config)


def test_recorded_sessions_equal_what_vllm_decided(adapter_run: AdapterRun) -> None:
    run = adapter_run
    preemptions = 0
    for name in run.names:
        result = json.loads((run.out_dir / f"{name}.json").read_text())
        obs = result["observer"]
        assert obs["delivered"] and obs["dropped"] == 0 and obs["errors"] == 0, name
        assert obs["observer_errors"] == 0, name
        frames = recorded(run.base, run.db_url, obs["session"], obs["last_seq"])
        assert [f["seq"] for f in frames] == list(range(1, obs["last_seq"] + 1))
        _check_announce(run, name, frames[0]["data"])
        its = [f["data"] for f in frames if f["type"] == "iteration"]
        steps, renum = engine_steps(result["steps"])
        _check_steps(steps, its)
        state = httpx.get(f"{run.base}/api/sessions/{obs['session']}/state").json()
        plans = [list(h["plan"].items()) for h in state["history"]]
        assert plans == [list(s["scheduled"].items()) for s in steps], name
        assert state["meta"]["source"] == "node:vllm-test"
        assert state["meta"]["config"]["async_scheduling"] is name.endswith(".async"), name
        _check_requests(run.base, obs["session"], result["requests"], renum)
        if name == "spec_decode":
            assert result["total_accepted_tokens"] > 0
            rows = {r["req"]: r for r in state["requests"]}
            accepted = sum(r["num_accepted_tokens"] for r in rows.values())
            assert accepted == result["total_accepted_tokens"]
        preemptions += result["total_preemptions"]
        # The scheduler's close() ended the session: its last frame, and the recording.
        last = frames[-1]
        assert (last["type"], last["data"]["event"], last["data"]["reason"]) == (
            "session",
            "closed",
            "shutdown",
        ), name
        assert last["data"]["observer_errors"] == 0
        session = httpx.get(f"{run.base}/api/sessions/{obs['session']}").json()
        assert session["ended_at"] is not None, name
    assert preemptions > 0


def _mooncake(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_a_node_recording_exports_its_prompts_block_hashes(
    adapter_run: AdapterRun, new_database: NewUrl, tmp_path: Path
) -> None:
    """The adapter sends no prompt, but each arrival's 512-token block hashes (hashed on
    its sender thread): the Mooncake export of a vLLM node's recording gives equal ids to
    equal prefixes. Exported as JSONL and imported into SQLite and PostgreSQL, the
    recording exports the same trace."""
    run = adapter_run
    result = json.loads((run.out_dir / f"{PREFIX_SCENARIO}.json").read_text())
    sid = result["observer"]["session"]
    auth = {"Authorization": f"Bearer {TOKEN}"}
    url = f"{run.base}/api/sessions/{sid}/export"
    got = httpx.get(url, params={"format": "mooncake"}, headers=auth, timeout=60)
    assert got.status_code == 200, got.text
    rows = _mooncake(got.text)
    assert [r["input_length"] for r in rows] == [1224, 1324, 600]
    a, b, c = (r["hash_ids"] for r in rows)
    assert a == [0, 1, 2] and b == [0, 1, 3] and c == [4, 5]  # shared 1024, then apart
    assert [r["output_length"] for r in rows] == [4, 4, 4]
    # Any multiple of 512 reads every k-th key; a finer block is refused.
    coarse = _mooncake(httpx.get(url, params={"format": "mooncake", "block_tokens": 1024},
                                 headers=auth, timeout=60).text)  # fmt: skip
    assert [r["hash_ids"] for r in coarse] == [[0, 1], [0, 2], [3]]
    fine = httpx.get(url, params={"format": "mooncake", "block_tokens": 16}, headers=auth)
    assert fine.status_code == 422 and "multiple of 512" in fine.text
    # The recording's frames round-trip through either database unchanged.
    frames = httpx.get(url, params={"format": "jsonl"}, headers=auth, timeout=60)
    assert frames.status_code == 200
    dump = tmp_path / "node.jsonl"
    dump.write_text(frames.text, encoding="utf-8")
    for sessions in open_sessions(new_database()):
        assert import_jsonl(sessions, dump) == sid
        with sessions() as db:
            assert _mooncake("".join(mooncake_lines(db, sid))) == rows


def _sender(url: str, node: str) -> Sender:
    """A sender of a made-up node (no vLLM), not started."""
    announce = {"name": node, "engine": "vllm", "runner": "vllm", "model": "m", "config": {}}
    return Sender(url, TOKEN, node, announce, max_tokens=64, max_seqs=4, total_blocks=10)


def test_sender_reconnects_resends_and_refuses_control(tmp_path: Path) -> None:
    """The sender side alone (no vLLM needed): it starts before the dashboard exists,
    connects once it is up, delivers its opened mark, and refuses control commands."""
    port = free_port()
    sender = _sender(f"ws://127.0.0.1:{port}/ws/ingest", "lonely")
    sender.start()
    time.sleep(0.5)  # nobody listening yet: it buffers and retries
    dash = start_dashboard(tmp_path, timeout=DASHBOARD_START_S, port=port)
    base = dash.url
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
        # The dashboard knows a vLLM node is read-only: a 409 with the reason, nothing sent.
        assert r.status_code == 409 and "read-only" in r.text and "lonely" in r.text
        assert sender.close(5.0)
    finally:
        sender.close(1.0)
        dash.stop()


def test_a_stop_signal_ends_the_session_before_the_handler_in_place(tmp_path: Path) -> None:
    """The stop path alone (no vLLM needed; tests/vllm_node stops real servers): in a
    process whose SIGTERM handler is Python code (vLLM's engine core installs one), the
    adapter's handler runs first and the closing frame is on the socket before the handler
    it chained runs; the dashboard shows the node ended by a shutdown. Elsewhere (SIGTERM
    at its default) nothing is chained."""
    dash = start_dashboard(tmp_path, timeout=DASHBOARD_START_S)
    base = dash.url
    sender = _sender(dash.ingest, "stopping")
    seen: list[tuple[int, bool]] = []

    def in_place(signum: int, _frame: Any) -> None:  # stands in for vLLM's own handler
        seen.append((signum, sender.wait_flushed(0)))

    def on_stop() -> None:
        sender.request_stop(5.0)
        sender.wait_flushed(10.0)

    saved = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        assert not chain_stop_signals(on_stop)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        signal.signal(signal.SIGTERM, in_place)
        sender.start()
        _wait(lambda: httpx.get(base + "/api/nodes").json()[0]["state"] == "live", 60)
        assert chain_stop_signals(on_stop)
        os.kill(os.getpid(), signal.SIGTERM)
        _wait(lambda: seen, 30)
        assert seen == [(signal.SIGTERM, True)]
        node = _wait(
            lambda: next(n for n in httpx.get(base + "/api/nodes").json() if n["state"] == "ended"),
            60,
        )
        assert (node["session"], node["end_reason"]) == (sender.session, "shutdown"), node
        assert sender.delivered()
    finally:
        signal.signal(signal.SIGTERM, saved[0])
        signal.signal(signal.SIGINT, saved[1])
        sender.close(1.0)
        dash.stop()
