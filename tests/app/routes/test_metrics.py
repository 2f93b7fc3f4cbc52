"""GET /metrics: Prometheus text (prometheus_client's exposition), vLLM's sample names.
What the samples hold: tests/app/live/test_metrics_exposition.py."""

from __future__ import annotations

import time

from prometheus_client import CONTENT_TYPE_LATEST

from tests.conftest import LiveServer


def test_metrics_is_prometheus_text_in_vllm_names(live_server: LiveServer) -> None:
    with live_server.client() as c:
        c.post("/api/requests", json={"prompt_len": 20, "max_tokens": 4, "count": 3})
        time.sleep(0.5)
        session = c.get("/api/state").json()["session"]
        resp = c.get("/metrics")
    assert resp.headers["content-type"] == CONTENT_TYPE_LATEST  # as vLLM serves it
    labels = f'engine="{session}",model_name="none (simulated)"'
    assert f"vllm:prompt_tokens_total{{{labels}}} 60.0" in resp.text
    for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
        assert f"{name}{{{labels}}}" in resp.text
