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
    labels = 'engine="local",model_name="none (simulated)"'
    assert f"vllm:prompt_tokens_total{{{labels}}} 60.0" in resp.text
    for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
        assert f"{name}{{{labels}}}" in resp.text
    info = f'batchscope:engine_session_info{{{labels},session="{session}"}} 1.0'
    assert info in resp.text


def _prompt_series(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("vllm:prompt_tokens_total{")]


def test_the_local_engine_is_one_series_across_its_sessions(live_server: LiveServer) -> None:
    """A new session (a scenario, new knobs) continues the local engine's series: its
    `engine` label is a stable name, not the session id; the session is an info gauge."""
    with live_server.client() as c:
        c.post("/api/requests", json={"prompt_len": 20, "max_tokens": 2, "count": 2})
        deadline = time.monotonic() + 20
        while _prompt_series(c.get("/metrics").text) != [
            'vllm:prompt_tokens_total{engine="local",model_name="none (simulated)"} 40.0'
        ]:
            assert time.monotonic() < deadline, _prompt_series(c.get("/metrics").text)
            time.sleep(0.1)
        first = c.get("/api/state").json()["session"]
        second = c.post("/api/engine/session", json={"max_num_seqs": 8}).json()["session"]
        assert second != first
        c.post("/api/requests", json={"prompt_len": 30, "max_tokens": 2})
        while True:
            text = c.get("/metrics").text
            if _prompt_series(text) == [
                'vllm:prompt_tokens_total{engine="local",model_name="none (simulated)"} 70.0'
            ]:
                break
            assert time.monotonic() < deadline, _prompt_series(text)
            time.sleep(0.1)
    assert first not in text  # no series is named after a session...
    info = [line for line in text.splitlines() if line.startswith("batchscope:engine_session")]
    assert info == [  # ...the session is the engine's info
        'batchscope:engine_session_info{engine="local",model_name="none (simulated)",'
        f'session="{second}"}} 1.0'
    ]
