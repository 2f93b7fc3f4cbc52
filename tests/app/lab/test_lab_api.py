"""The lab over HTTP on a real server process and a SQLite file: sweeps start, run in the
background, are listed and downloaded, survive a restart (a sweep cut off by the shutdown
keeps its finished runs, marked interrupted), and a run opens as a recorded session."""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path
from typing import Any

import httpx

from app.db.migrate import upgrade
from tests.conftest import LiveServer, server_process

GRID = {
    "source": "workload",
    "workload": "poisson:rate=50,n=30,prompt=64,output=16",
    "seed": 7,
    "knob": "max_num_batched_tokens",
    "values": "64,256",
    "knob2": "max_num_seqs",
    "values2": "4,16",
}


def wait_for(client: httpx.Client, sweep: str, check: Any, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        data: dict[str, Any] = client.get(f"/api/lab/sweeps/{sweep}").json()
        if check(data):
            return data
        assert time.monotonic() < deadline, data
        time.sleep(0.2)


def start(client: httpx.Client, body: dict[str, Any]) -> str:
    resp = client.post("/api/lab/sweeps", json=body)
    assert resp.status_code == 201, resp.text
    sweep: str = resp.json()["sweep"]
    return sweep


def test_sweeps_survive_a_restart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lab.db'}"
    upgrade(url)
    with server_process(url) as srv, srv.client() as c:
        done_id = start(c, GRID)
        done = wait_for(c, done_id, lambda d: d["status"] == "done")
        assert [p["knobs"] for p in done["points"]] == [
            {"max_num_batched_tokens": b, "max_num_seqs": s} for b in (64, 256) for s in (4, 16)
        ]
        csv_before = c.get(f"/api/lab/sweeps/{done_id}/download?format=csv").text
        opened = c.post(f"/api/lab/sweeps/{done_id}/points/2/session").json()
        # A long sweep, cut off by the shutdown once a few runs have finished.
        long_id = start(c, {**GRID, "values": "64:1024:32", "values2": "4,8,16", "repeat": 2})
        wait_for(c, long_id, lambda d: d["progress"]["done"] >= 2)
    with server_process(url) as srv, srv.client() as c:
        listed = {s["id"]: s for s in c.get("/api/lab/sweeps").json()}
        assert listed[done_id]["status"] == "done" and listed[done_id]["num_done"] == 4
        assert c.get(f"/api/lab/sweeps/{done_id}/download?format=csv").text == csv_before
        after = c.get(f"/api/lab/sweeps/{done_id}").json()
        assert after["points"] == [{**p, "session": after["points"][i]["session"]}
                                   for i, p in enumerate(done["points"])]  # fmt: skip
        # The opened run is still the same recorded session.
        again = c.post(f"/api/lab/sweeps/{done_id}/points/2/session").json()
        assert again == opened
        state = c.get(f"/api/sessions/{opened['session']}/state").json()
        assert len(state["requests"]) == 30
        cut = listed[long_id]
        assert cut["status"] == "interrupted"
        assert 2 <= cut["num_done"] < cut["num_points"] == 31 * 3 * 2
        page = c.get("/lab")
        assert page.status_code == 200 and done_id in page.text and long_id in page.text


def test_csv_download_and_the_json_twin(live_server: LiveServer) -> None:
    with live_server.client() as c:
        one_knob = {**GRID, "knob2": "", "values2": "", "set": "max_num_seqs=16", "repeat": 2}
        sweep = start(c, one_knob)
        data = wait_for(c, sweep, lambda d: d["progress"]["finished"])
        assert data["status"] == "done" and data["progress"] == {
            "done": 4, "total": 4, "percent": 100.0, "finished": True
        }  # fmt: skip
        resp = c.get(f"/api/lab/sweeps/{sweep}/download?format=csv")
        assert resp.headers["content-type"].startswith("text/csv")
        assert f'filename="{sweep}.csv"' in resp.headers["content-disposition"]
        rows = list(csv.DictReader(io.StringIO(resp.text)))
        assert [(int(r["max_num_batched_tokens"]), int(r["repeat"])) for r in rows] == [
            (64, 0), (64, 1), (256, 0), (256, 1)
        ]  # fmt: skip
        for row, p in zip(rows, data["points"], strict=True):
            assert float(row["ttft_p99_ms"]) == p["metrics"]["ttft_p99_ms"]
        # Repeats of a generated workload differ by seed (seed + repeat).
        assert data["points"][0]["metrics"] != data["points"][1]["metrics"]
        js = c.get(f"/api/lab/sweeps/{sweep}/download?format=json").json()
        assert [p["metrics"] for p in js["points"]] == [p["metrics"] for p in data["points"]]
        twin = c.get("/api/lab").json()
        assert sweep in [s["id"] for s in twin["sweeps"]]
        assert {e["name"] for e in twin["experiments"]} >= {"s6_chunk_size", "draft_length"}


def test_bad_requests_are_4xx(live_server: LiveServer) -> None:
    with live_server.client() as c, live_server.client(token=False) as anon:
        assert anon.post("/api/lab/sweeps", json=GRID).status_code == 401
        for body, message in (
            ({**GRID, "knob": "warp"}, "not an engine knob"),
            ({**GRID, "values": ""}, "give a knob and its values"),
            ({**GRID, "source": "library", "scenario": "nope"}, "no library scenario"),
            ({**GRID, "source": "session", "session": "s-nope"}, "no recorded session"),
            ({**GRID, "source": "scenario", "scenario_json": "{"}, "not valid JSON"),
            ({**GRID, "repeat": "many"}, "whole number"),
            ({**GRID, "runner": "gpu"}, "sim or torch"),
            ({**GRID, "values": "64:100000:1"}, "at most"),
        ):
            resp = c.post("/api/lab/sweeps", json=body)
            assert resp.status_code == 422 and message in resp.json()["detail"], resp.text
        assert c.get("/api/lab/sweeps/nope").status_code == 404
        assert c.get("/lab/sweeps/nope").status_code == 404
        assert c.post("/api/lab/experiments/nope/run").status_code == 404
        assert c.post("/api/lab/sweeps/nope/points/0/session").status_code == 404
        sweep = start(c, GRID)
        wait_for(c, sweep, lambda d: d["progress"]["finished"])
        assert c.post(f"/api/lab/sweeps/{sweep}/points/99/session").status_code == 404
        assert c.get(f"/api/lab/sweeps/{sweep}/download?format=xml").status_code == 422
        assert c.post(f"/api/lab/sweeps/{sweep}/cancel").status_code == 409
        assert c.delete(f"/api/lab/sweeps/{sweep}").status_code == 200
        assert c.get(f"/api/lab/sweeps/{sweep}").status_code == 404


def test_a_recording_is_a_sweep_source(live_server: LiveServer) -> None:
    with live_server.client() as c:
        recorded = c.post("/api/scenarios/seed/load").json()["session"]
        deadline = time.monotonic() + 20
        while True:
            state = c.get(f"/api/sessions/{recorded}/state")
            reqs = state.json()["requests"] if state.status_code == 200 else []
            if len(reqs) == 3 and all(r["status"] == "FINISHED" for r in reqs):
                break
            assert time.monotonic() < deadline
            time.sleep(0.2)
        body = {"source": "session", "session": recorded, "knob": "long_prefill_token_threshold",
                "values": "0,4"}  # fmt: skip
        data = wait_for(c, start(c, body), lambda d: d["progress"]["finished"])
        assert data["status"] == "done" and data["source"]["label"] == f"recording {recorded}"
        assert [p["metrics"]["requests_finished"] for p in data["points"]] == [3.0, 3.0]
        # The seed's own knobs came along (budget 6): without the per-request cap the
        # same work needs no more steps.
        assert data["points"][0]["metrics"]["steps"] <= data["points"][1]["metrics"]["steps"]


def test_the_release_is_a_lab_knob_over_every_release(live_server: LiveServer) -> None:
    body = {**GRID, "knob": "vllm_version", "values": "0.20,0.27,0.33", "knob2": "", "values2": ""}
    with live_server.client() as c:
        sweep = start(c, body)
        done = wait_for(c, sweep, lambda d: d["progress"]["finished"])
        assert [p["knobs"] for p in done["points"]] == [
            {"vllm_version": v} for v in ("0.20", "0.27", "0.33")
        ]
        resp = c.post("/api/lab/sweeps", json={**body, "values": "0.20,0.35"})
        assert resp.status_code == 422, resp.text
        assert "from 0.20 to 0.34" in resp.json()["detail"]
