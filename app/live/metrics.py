"""Prometheus metrics in vLLM's names, fed by the hub, so vLLM's Grafana dashboards work."""

from __future__ import annotations

import bisect
from typing import Any

from app.live.hub import EventHub

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


class Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out, cumulative = [], 0
        for bound, n in zip(self.buckets, self.counts, strict=False):
            cumulative += n
            out.append(f'{name}_bucket{{{labels},le="{bound}"}} {cumulative}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        out.append(f"{name}_sum{{{labels}}} {self.sum}")
        out.append(f"{name}_count{{{labels}}} {self.count}")
        return out


class Metrics:
    """Counters since the server started, over every session the hub carries."""

    def __init__(self, hub: EventHub) -> None:
        self.hub = hub
        self.counters = {
            "num_preemptions": 0,
            "prompt_tokens": 0,
            "generation_tokens": 0,
            "prefix_cache_queries": 0,
            "prefix_cache_hits": 0,
        }
        self.hist = {
            "time_to_first_token_seconds": Histogram(TTFT_BUCKETS),
            "inter_token_latency_seconds": Histogram(ITL_BUCKETS),
            "e2e_request_latency_seconds": Histogram(LATENCY_BUCKETS),
            "request_queue_time_seconds": Histogram(LATENCY_BUCKETS),
            "iteration_tokens_total": Histogram(TOKEN_BUCKETS),
        }
        self._arrived_t: dict[tuple[str, str], float] = {}
        self._last_token_t: dict[tuple[str, str], float] = {}
        hub.add_listener(self.on_frame)

    def on_frame(
        self, session: str, frame_type: str, seq: int, data: dict[str, Any], text: str
    ) -> None:
        del seq, text
        c, h = self.counters, self.hist
        if frame_type == "iteration":
            t_end = data["t_start"] + data["duration"]
            h["iteration_tokens_total"].observe(data["budget"]["used"])
            c["num_preemptions"] += len(data["preempted"])
            c["generation_tokens"] += len(data["sampled"])
            state = self.hub.live_state(session)
            for item in data["scheduled"]:
                if item["req"] in data["new"] or item["req"] in data["resumed"]:
                    row = state.requests.get(item["req"]) if state else None
                    c["prefix_cache_queries"] += row["num_tokens"] if row else item["n"]
                    c["prefix_cache_hits"] += item["prefix_hit"]
            for req in data["sampled"]:
                key = (session, req)
                prev = self._last_token_t.get(key)
                if prev is not None:
                    h["inter_token_latency_seconds"].observe(t_end - prev)
                self._last_token_t[key] = t_end
        elif frame_type == "request":
            key = (session, data["req"])
            kind, t = data["kind"], data["t"]
            if kind == "arrived":
                self._arrived_t[key] = t
                c["prompt_tokens"] += data["detail"].get("num_prompt_tokens", 0)
            elif kind == "scheduled" and key in self._arrived_t:
                h["request_queue_time_seconds"].observe(t - self._arrived_t[key])
            elif kind == "first_token" and key in self._arrived_t:
                h["time_to_first_token_seconds"].observe(t - self._arrived_t[key])
            elif kind in ("finished", "aborted", "rejected"):
                arrived = self._arrived_t.pop(key, None)
                self._last_token_t.pop(key, None)
                if kind == "finished" and arrived is not None:
                    h["e2e_request_latency_seconds"].observe(t - arrived)

    def render(self, model_name: str) -> str:
        labels = f'model_name="{model_name}",engine="0"'
        state = self.hub.live_state()
        running = waiting = 0
        usage = 0.0
        if state is not None and state.history:
            last = state.history[-1]
            running, waiting = last["running"], last["waiting"]
            usage = last["kv_used"] / last["kv_total"] if last["kv_total"] else 0.0
        lines = [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {running}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{labels}}} {waiting}",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{labels}}} {usage:.6f}",
        ]
        for name, value in self.counters.items():
            lines.append(
                f"# TYPE vllm:{name}_total counter"
                if not name.startswith("prefix")
                else f"# TYPE vllm:{name} counter"
            )
            metric = f"vllm:{name}_total" if not name.startswith("prefix") else f"vllm:{name}"
            lines.append(f"{metric}{{{labels}}} {value}")
        for name, hist in self.hist.items():
            lines.append(f"# TYPE vllm:{name} histogram")
            lines.extend(hist.lines(f"vllm:{name}", labels))
        return "\n".join(lines) + "\n"
