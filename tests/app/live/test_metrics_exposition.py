"""GET /metrics read as Prometheus stores it: the raw exposition text, sample names taken
verbatim (no client library that adds `_total` for us), checked against every name vLLM's
Grafana dashboards query (vllm_dashboard_metrics.txt) and against the session's own
numbers."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import websockets.sync.client as ws_client

from protocol.frames import request_payload
from tests.app.live.frames import iteration
from tests.conftest import LiveServer

NAMES_FILE = Path(__file__).with_name("vllm_dashboard_metrics.txt")
BLOCKS = [[1, "used", "a", 1], [2, "used", "a", 1]]
STOPPED = [{"req": "a", "reason": "stop"}]


def dashboard_names() -> tuple[list[str], list[str]]:
    """(names batchscope exports, names of features it has no counterpart for)."""
    ours: list[str] = []
    not_ours: list[str] = []
    target = ours
    for line in NAMES_FILE.read_text().splitlines():
        if line.startswith("#!"):
            target = not_ours
        elif line and not line.startswith("#"):
            target.append(line)
    return ours, not_ours


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample line, parsed by hand."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, _, rest = head.partition("{")
        labels = {}
        for part in rest.rstrip("}").split('",'):
            if part:
                key, _, val = part.partition('="')
                labels[key] = val.rstrip('"')
        out.append((name, labels, float(value)))
    return out


def value(text: str, name: str, **labels: str) -> float:
    found = [v for n, lab, v in samples(text) if n == name and labels.items() <= lab.items()]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def wait_finished(c: httpx.Client, n: int) -> None:
    deadline = time.monotonic() + 20
    while c.get("/api/stats").json()["finished"] < n:
        assert time.monotonic() < deadline, "requests did not finish"
        time.sleep(0.05)


def test_every_scheduler_request_and_kv_name_of_vllms_dashboards(
    live_server: LiveServer,
) -> None:
    with live_server.client() as c:
        assert c.post("/api/scenarios/spec_decode/load").status_code == 200
        time.sleep(0.5)
        text = c.get("/metrics").text
    present = {name for name, _, _ in samples(text)}
    ours, not_ours = dashboard_names()
    assert len(ours) + len(not_ours) == 109
    missing = [n for n in ours if n not in present]
    assert not missing, missing
    assert len(ours) == 63
    # The names Prometheus stores are exactly vLLM's: counters end in _total, once.
    assert "# TYPE vllm:prefix_cache_queries_total counter" in text
    assert "vllm:prefix_cache_queries{" not in text
    assert not any(n.endswith("_total_total") for n in present)


def test_counters_and_histograms_follow_the_session(live_server: LiveServer) -> None:
    with live_server.client() as c:
        body = {"prompt_len": 40, "max_tokens": 5, "count": 3, "shared_prefix": "system"}
        assert c.post("/api/requests", json=body).status_code == 201
        wait_finished(c, 3)
        state = c.get("/api/state").json()
        text = c.get("/metrics").text
    labels = {"engine": "local"}
    prompt = sum(r["num_prompt_tokens"] for r in state["requests"])
    cached = sum(r["prefix_hit"] for r in state["requests"])
    assert cached > 0  # the shared 64-token prefix was hit
    assert value(text, "vllm:prompt_tokens_total", **labels) == prompt
    assert value(text, "vllm:prefix_cache_queries_total", **labels) == prompt
    assert value(text, "vllm:prefix_cache_hits_total", **labels) == cached
    assert value(text, "vllm:prompt_tokens_cached_total", **labels) == cached
    by_source = {
        s: value(text, "vllm:prompt_tokens_by_source_total", source=s, **labels)
        for s in ("local_compute", "local_cache_hit", "external_kv_transfer")
    }
    assert by_source == {
        "local_compute": prompt - cached,
        "local_cache_hit": cached,
        "external_kv_transfer": 0,
    }
    assert value(text, "vllm:generation_tokens_total", **labels) == 15
    assert value(text, "vllm:request_success_total", finished_reason="length", **labels) == 3
    assert value(text, "vllm:request_success_total", finished_reason="stop", **labels) == 0
    assert value(text, "vllm:request_generation_tokens_sum", **labels) == 15
    assert value(text, "vllm:request_prefill_kv_computed_tokens_sum", **labels) == prompt - cached
    steps = state["totals"]["steps"]
    assert value(text, "vllm:iteration_tokens_total_count", **labels) == steps
    assert (
        value(text, "vllm:iteration_tokens_total_sum", **labels)
        == (state["totals"]["scheduled_tokens"])
    )
    for hist in ("vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds"):
        assert value(text, f"{hist}_count", **labels) == 3
        buckets = [v for n, lab, v in samples(text) if n == f"{hist}_bucket"]
        assert buckets == sorted(buckets) and buckets[-1] == 3
        assert value(text, f"{hist}_bucket", le="+Inf", **labels) == 3
    # vLLM's bucket boundaries, not ours.
    assert value(text, "vllm:request_queue_time_seconds_bucket", le="0.3", **labels) <= 3
    assert value(text, "vllm:time_to_first_token_seconds_bucket", le="2560.0", **labels) == 3
    max_len = state["config"]["max_model_len"]
    les = [
        lab["le"]
        for n, lab, _ in samples(text)
        if n == "vllm:request_prompt_tokens_bucket" and lab["engine"] == labels["engine"]
    ]
    assert les[:4] == ["1.0", "2.0", "5.0", "10.0"] and float(les[-2]) <= max_len
    running = value(text, "vllm:num_requests_running", **labels)
    waiting = value(text, "vllm:num_requests_waiting", **labels)
    assert (running, waiting) == (0, 0)
    assert value(text, "vllm:num_requests_waiting_by_reason", reason="capacity", **labels) == 0
    assert value(text, "vllm:cache_config_info", **labels) == 1


def test_each_session_and_node_is_its_own_series(live_server: LiveServer) -> None:
    """A node pushing frames gets `engine` = its name and `model_name` = its served model;
    the local session beside it keeps its own series."""
    ws_url = live_server.ws_url + "/ws/ingest"
    headers = {"Authorization": f"Bearer {live_server.token}"}
    with ws_client.connect(ws_url, additional_headers=headers) as ws:
        ws.send(
            json.dumps(
                {
                    "type": "announce",
                    "node": "gpu-7-dp1",
                    "engine": "vllm",
                    "model": "/models/llama",
                    "served_model_name": "llama-3-8b",
                    "config": {"max_model_len": 256, "block_size": 16},
                }
            )
        )
        welcome = json.loads(ws.recv())
        session = welcome["session"]
        frames = [
            ("request", request_payload("a", "arrived", 0, 0.0, {"num_prompt_tokens": 20})),
            ("iteration", iteration(0, 20, 0, new=["a"], arrived=["a"], blocks=BLOCKS)),
            ("request", request_payload("a", "scheduled", 0, 0.0)),
            ("request", request_payload("a", "first_token", 0, 0.05)),
            ("iteration", iteration(1, 1, 20, finished=STOPPED, num_running_end=0, kv_used_end=0)),
            ("request", request_payload("a", "finished", 1, 0.1, {"reason": "stop"})),
        ]
        for seq, (kind, data) in enumerate(frames, 1):
            ws.send(json.dumps({"type": kind, "session": session, "seq": seq, "data": data}))
        deadline = time.monotonic() + 10
        node = {"engine": "gpu-7-dp1", "model_name": "llama-3-8b"}
        while True:
            text = httpx.get(live_server.url + "/metrics").text
            done = 'engine="gpu-7-dp1"' in text and 'finished_reason="stop"' in text
            if done and value(text, "vllm:request_success_total", finished_reason="stop", **node):
                break
            assert time.monotonic() < deadline, text[-2000:]
            time.sleep(0.05)
    assert value(text, "vllm:prompt_tokens_total", **node) == 20
    assert value(text, "vllm:generation_tokens_total", **node) == 2
    assert value(text, "vllm:time_to_first_token_seconds_sum", **node) == 0.05
    engines = {lab["engine"] for n, lab, _ in samples(text) if n == "vllm:prompt_tokens_total"}
    assert len(engines) == 2 and "gpu-7-dp1" in engines  # the local session's and the node's
