"""GET /metrics: Prometheus text in vLLM's metric names."""

from __future__ import annotations

import time

from tests.conftest import LiveServer


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
