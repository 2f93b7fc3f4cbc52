"""Control routes over real HTTP: token, origin, validation with the vLLM rule, pause/step."""

from __future__ import annotations

import time

from tests.conftest import LiveServer


def test_control_without_token_is_401_and_foreign_origin_403(live_server: LiveServer) -> None:
    with live_server.client(token=False) as c:
        r = c.post("/api/requests", json={"prompt_len": 10, "max_tokens": 2})
        assert r.status_code == 401 and "token" in r.json()["detail"]
        assert c.post("/api/pause").status_code == 401
    with live_server.client() as c:
        r = c.post("/api/pause", headers={"Origin": "http://evil.example"})
        assert r.status_code == 403


def test_bad_knob_values_get_422_naming_the_vllm_rule(live_server: LiveServer) -> None:
    with live_server.client() as c:
        r = c.post("/api/config", json={"max_num_seqs": 100000})
        assert r.status_code == 422
        assert r.json()["detail"].startswith("max_num_batched_tokens:")
        assert "max_num_seqs" in r.json()["detail"]
        r = c.post("/api/config", data={"enable_chunked_prefill": "false"})
        assert r.status_code == 422 and "max_model_len" in r.json()["detail"]
        r = c.post("/api/config", json={"max_num_batched_tokens": "lots"})
        body = r.json()  # the one error body: a sentence, and the field at fault
        assert r.status_code == 422 and body["detail"].startswith("max_num_batched_tokens: ")
        assert [e["loc"] for e in body["errors"]] == [["body", "max_num_batched_tokens"]]
        assert c.post("/api/config", json={"num_gpu_blocks": 5}).status_code == 422
        ok = c.post("/api/config", json={"max_num_batched_tokens": 64})
        assert ok.status_code == 200 and ok.json()["config"]["max_num_batched_tokens"] == 64
        assert c.get("/api/config").json()["config_version"] == 1


def test_inject_bounds_and_rejections(live_server: LiveServer) -> None:
    with live_server.client() as c:
        assert c.post("/api/requests", json={"prompt_len": 0, "max_tokens": 2}).status_code == 422
        assert c.post("/api/requests", json={"prompt_len": 5, "count": 10**6}).status_code == 422
        r = c.post("/api/requests", json={"prompt": "x" * 100_000, "max_tokens": 2})
        assert r.status_code == 422 and r.json()["detail"].startswith("prompt:")
        r = c.post("/api/requests", json={"prompt": "<script>alert(1)</script>", "max_tokens": 3})
        assert r.status_code == 201
        req_id = r.json()["req_ids"][0]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            rows = {row["req"]: row for row in c.get("/api/requests").json()}
            if rows.get(req_id, {}).get("status") == "FINISHED":
                break
            time.sleep(0.05)
        assert rows[req_id]["num_tokens"] == rows[req_id]["num_prompt_tokens"] + 3
        assert c.post("/api/requests/nope/abort").status_code == 404


def test_pause_and_single_step_advance_exactly_one_step(live_server: LiveServer) -> None:
    with live_server.client() as c:
        assert c.post("/api/pause").status_code == 200
        c.post("/api/requests", json={"prompt_len": 30, "max_tokens": 50})
        time.sleep(0.2)
        before = c.get("/api/state").json()["step"]
        time.sleep(0.2)
        assert c.get("/api/state").json()["step"] == before
        assert c.post("/api/step").status_code == 200
        deadline = time.monotonic() + 5
        while c.get("/api/state").json()["step"] == before and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
        assert c.get("/api/state").json()["step"] == before + 1
        assert c.get("/api/state").json()["paused"] is True
        assert c.post("/api/resume").status_code == 200
