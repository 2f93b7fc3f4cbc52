"""Control routes over real HTTP: token, origin, validation with the vLLM rule, JSON twins."""

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
        assert r.status_code == 422 and r.json()["detail"] == (
            "max_num_batched_tokens: must be an integer"
        )
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


def test_scenario_load_runs_the_seed_table(live_server: LiveServer) -> None:
    with live_server.client() as c:
        names = [s["name"] for s in c.get("/api/scenarios").json()]
        assert {
            "seed",
            "kv_pressure",
            "shared_prefixes",
            "priority",
            "long_prompt_vs_decodes",
        } <= set(names)
        assert c.post("/api/scenarios/nope/load").status_code == 404
        assert c.post("/api/scenarios/seed/load").status_code == 200
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            state = c.get("/api/state").json()
            if sum(1 for r in state["requests"] if r["status"] == "FINISHED") == 3:
                break
            time.sleep(0.05)
        plans = [h["plan"] for h in state["history"]]
        assert plans == [
            {"A": 4, "B": 2},
            {"A": 1, "B": 4, "C": 1},
            {"B": 2, "C": 2},
            {"B": 1, "C": 1},
            {"B": 1},
        ]


def test_metrics_use_vllm_names(live_server: LiveServer) -> None:
    with live_server.client() as c:
        c.post("/api/requests", json={"prompt_len": 20, "max_tokens": 4, "count": 3})
        time.sleep(0.5)
        text = c.get("/metrics").text
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:prefix_cache_queries",
        "vllm:prefix_cache_hits",
        "vllm:iteration_tokens_total_bucket",
        "vllm:time_to_first_token_seconds_count",
        "vllm:inter_token_latency_seconds_sum",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:request_queue_time_seconds_bucket",
    ):
        assert name in text, name
    assert 'vllm:prompt_tokens_total{model_name="none (simulated)",engine="0"} 60' in text
