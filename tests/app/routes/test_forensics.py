"""Request forensics from the recording (GET /api/requests/{req}), the request table's
JSON twin with filters, and a recording's block map at a step: checked against the
recorded frames themselves (the JSONL export), parsed whole and folded independently."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from sqlalchemy import text

from app.records import frame_slices
from app.records import request_life as request_life_module
from engine.waiting import waiting_text
from tests.app.full_reasons import with_full_reasons
from tests.conftest import LiveServer


def run_scenario(c: httpx.Client, name: str) -> tuple[str, list[dict[str, Any]]]:
    """Load scenario `name`, wait until every request finished and the recording has
    every step; return the session id and its iteration frames (envelopes), with their
    waiting reasons as full maps (tests.app.full_reasons; the recording's are compact)."""
    sid: str = c.post(f"/api/scenarios/{name}/load").json()["session"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        state = c.get("/api/state").json()
        done = state["requests"] and all(r["status"] == "FINISHED" for r in state["requests"])
        got = c.get(f"/api/sessions/{sid}")
        if done and got.status_code == 200:
            meta = got.json()
            if meta["steps"] == state["step"] + 1 and meta["requests"] == len(state["requests"]):
                break
        time.sleep(0.1)
    else:
        raise AssertionError(f"scenario {name} did not finish")
    lines = c.get(f"/api/sessions/{sid}/export?format=jsonl").text.splitlines()
    frames = [json.loads(line) for line in lines if line.strip()]
    frames = [f for f in frames if f.get("type") in ("iteration", "request")]
    return sid, [f for f in with_full_reasons(frames) if f["type"] == "iteration"]


def expected_life(req: str, frames: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-step facts of `req`, folded from whole frames."""
    chunks, waits, preempted = [], [], []
    for f in frames:
        d = f["data"]
        for item in d["scheduled"]:
            if item["req"] == req:
                chunks.append((d["step"], item["n"], item["start"], item["phase"]))
        if req in d["waiting_reasons"]:
            reason = d["waiting_reasons"][req]
            text = waiting_text(req, reason, d.get("waiting_detail"))
            waits.append((d["step"], reason, text))
        preempted += [(d["step"], p["tokens_lost"]) for p in d["preempted"] if p["req"] == req]
    return {"chunks": chunks, "waits": waits, "preempted": preempted}


def test_a_preempted_requests_life_matches_the_recorded_frames(live_server: LiveServer) -> None:
    with live_server.client() as c:
        sid, frames = run_scenario(c, "kv_pressure")
        state = c.get(f"/api/sessions/{sid}/state").json()
        victims = [r["req"] for r in state["requests"] if r["num_preemptions"]]
        assert victims, "kv_pressure preempts"
        for req in [*victims, state["requests"][0]["req"]]:
            life = c.get(f"/api/requests/{req}", params={"session": sid}).json()
            want = expected_life(req, frames)
            got = [(s["step"], s["n"], s["start"], s["phase"]) for s in life["scheduled"]]
            assert got == want["chunks"]
            steps = [(s, r, t) for w in life["waits"] for s, r, t in _expand(w)]
            assert steps == want["waits"]
            assert [(p["step"], p["tokens_lost"]) for p in life["preemptions"]] == want["preempted"]
            row = next(r for r in state["requests"] if r["req"] == req)
            prefills = [s[1:4:2] for s in row["segments"] if s[0] == "prefill"]
            assert [[s["step"], s["n"]] for s in life["scheduled"] if s["phase"] == "prefill"] == [
                list(p) for p in prefills
            ]
            assert life["status"] == "FINISHED" and life["latency"]["e2e"] > 0
            assert life["blocks"] and all(b["to"] is not None for b in life["blocks"])
        # A preemption's blocks are freed at its step; the recompute follows its resume.
        p = c.get(f"/api/requests/{victims[0]}", params={"session": sid}).json()["preemptions"][0]
        assert p["blocks_freed"] > 0 and p["resumed_step"] > p["step"]
        assert 0 < p["recomputed_tokens"] <= p["tokens_lost"]
        # Up to a step: still waiting there, with the reason of that step.
        first_wait = want_first_wait(victims[0], frames)
        early = c.get(
            f"/api/requests/{victims[0]}", params={"session": sid, "step": first_wait}
        ).json()
        assert early["upto_step"] == first_wait and early["status"] == "PREEMPTED"
        # Waits come from the steps' numbers, not from every frame of the wait...
        long_wait = max(victims, key=lambda r: len(expected_life(r, frames)["waits"]))
        life = c.get(f"/api/requests/{long_wait}", params={"session": sid}).json()
        span = life["upto_step"] - life["request"]["arrival_step"] + 1
        waited = len(expected_life(long_wait, frames)["waits"])
        assert life["frames"]["scanned"] < span - waited // 2
        # ... and a recording without those numbers (made before them) reads the frames.
        with live_server.app.state.db.begin() as db:
            db.execute(text("DELETE FROM step_waits WHERE session_id = :s"), {"s": sid})
        request_life_module._CACHE.clear()
        again = c.get(f"/api/requests/{long_wait}", params={"session": sid}).json()
        assert again["waits"] == life["waits"] and again["scheduled"] == life["scheduled"]
        assert again["frames"]["scanned"] == span
        assert c.get("/api/requests/nope", params={"session": sid}).status_code == 404
        assert c.get("/api/requests/r1", params={"session": "s-nope"}).status_code == 404


def want_first_wait(req: str, frames: list[dict[str, Any]]) -> int:
    preempted = False
    for f in frames:
        d = f["data"]
        preempted = preempted or any(p["req"] == req for p in d["preempted"])
        if preempted and req in d["waiting_reasons"]:
            return int(d["step"])
    raise AssertionError("no wait after the preemption")


def _expand(w: dict[str, Any]) -> list[tuple[int, str, str]]:
    return [(s, w["reason"], w["text"]) for s in range(w["from"], w["to"] + 1)]


def test_frame_slices_agree_with_whole_frames(live_server: LiveServer) -> None:
    """The fast path reads the same facts as json.loads, for every request of every step."""
    lines: list[str] = []
    with live_server.client() as c:
        for name in ("shared_prefixes", "kv_pressure"):
            sid, _ = run_scenario(c, name)
            lines += c.get(f"/api/sessions/{sid}/export?format=jsonl").text.splitlines()
    assert any('"waiting_default":' in line for line in lines)  # a compact recording
    for line in lines:
        if '"type":"iteration"' not in line:
            continue
        whole = json.loads(line)["data"]
        for req in {i["req"] for i in whole["scheduled"]} | set(whole["waiting_reasons"]):
            part = frame_slices.request_slice(line, req, json.dumps(req))
            assert part is not None
            assert part["scheduled"] == [i for i in whole["scheduled"] if i["req"] == req]
            assert part["waiting_reasons"] == (
                {req: whole["waiting_reasons"][req]} if req in whole["waiting_reasons"] else {}
            )
            assert part.get("waiting_default") == whole.get("waiting_default")
            for key in ("step", "preempted", "finished", "sampled", "blocks", "updated_step"):
                assert part[key] == whole[key], key
            assert frame_slices.all_scheduled(line, part["scheduled_at"]) == whole["scheduled"]


def test_prefix_hits_show_the_shared_blocks(live_server: LiveServer) -> None:
    with live_server.client() as c:
        sid, _ = run_scenario(c, "shared_prefixes")
        rows = c.get(f"/api/sessions/{sid}/requests", params={"prefix_hit": "yes"}).json()
        assert rows and all(r["prefix_hit"] > 0 for r in rows)
        life = c.get(f"/api/requests/{rows[0]['req']}", params={"session": sid}).json()
        first = life["scheduled"][0]
        assert first["prefix_hit"] == rows[0]["prefix_hit"]
        hit_blocks = [b for b in life["blocks"] if not b["own"]]
        assert len(hit_blocks) == first["prefix_hit"] // 16
        assert all(b["from"] == first["step"] for b in hit_blocks)


def test_the_requests_twin_filters_and_sorts(live_server: LiveServer) -> None:
    with live_server.client() as c:
        sid, frames = run_scenario(c, "kv_pressure")
        rows = c.get("/api/requests").json()
        ids = [r["req"] for r in c.get("/api/state").json()["requests"]]
        assert [r["req"] for r in rows] == ids
        pre = c.get("/api/requests", params={"preempted": "yes"}).json()
        assert pre and {r["req"] for r in pre} == {r["req"] for r in rows if r["num_preemptions"]}
        by_e2e = c.get("/api/requests", params={"sort": "-e2e"}).json()
        assert [r["e2e"] for r in by_e2e] == sorted((r["e2e"] for r in rows), reverse=True)
        one = c.get("/api/requests", params={"q": rows[1]["req"].upper()}).json()
        assert [r["req"] for r in one] == [rows[1]["req"]]
        assert c.get("/api/requests", params={"status": "running"}).json() == []
        page = c.get("/api/requests", params={"offset": 1, "limit": 2}).json()
        assert [r["req"] for r in page] == [r["req"] for r in rows[1:3]]
        for bad in ({"status": "asleep"}, {"sort": "speed"}, {"preempted": "maybe"},
                    {"phase": "think"}, {"limit": "-1"}):  # fmt: skip
            r = c.get("/api/requests", params=bad)
            assert r.status_code == 422, bad
            assert r.json()["errors"][0]["loc"] == ["query", next(iter(bad))], r.json()
        # The recording's twin at a step: waiting rows say why, with the step's numbers.
        d = next(f["data"] for f in frames if f["data"]["waiting_reasons"])
        query = {"step": d["step"], "status": "waiting,preempted"}
        waiting = c.get(f"/api/sessions/{sid}/requests", params=query).json()
        assert {r["req"] for r in waiting} == set(d["waiting_reasons"])
        for r in waiting:
            reason = d["waiting_reasons"][r["req"]]
            assert r["waiting_text"] == waiting_text(r["req"], reason, d.get("waiting_detail"))
        blocks = c.get(f"/api/sessions/{sid}/blocks", params={"step": d["step"]}).json()
        state = c.get(f"/api/sessions/{sid}/state", params={"step": d["step"]}).json()
        assert blocks["step"] == d["step"] and blocks["blocks"] == state["blocks"]


def test_async_and_spec_lives_carry_batches_and_drafts(live_server: LiveServer) -> None:
    with live_server.client() as c:
        sid, _ = run_scenario(c, "async_placeholders")
        life = c.get("/api/requests/A", params={"session": sid}).json()
        assert life["modes"]["async_scheduling"] is True
        assert [o["batch"] for o in life["outputs"]] == [o["step"] - 1 for o in life["outputs"]]
        assert life["placeholders"] and life["placeholders"][-1][1] == 0
        sid, _ = run_scenario(c, "spec_decode")
        life = c.get("/api/requests/r1", params={"session": sid}).json()
        assert life["modes"]["num_speculative_tokens"] == 4
        drafted = [s for s in life["scheduled"] if s["spec"]]
        assert drafted and all(0 <= s["accepted"] <= s["spec"] for s in drafted)
        assert sum(o["n"] for o in life["outputs"]) == 40  # max_tokens
