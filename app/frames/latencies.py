"""The latest latency samples of a session (seconds) and their summary."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from protocol.views import LatencySummary, Quantiles

LATENCY_SAMPLES = 4096


class Latencies:
    def __init__(self) -> None:
        self.ttft: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self.itl: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self.queue: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self.e2e: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self.last_token_t: dict[str, float] = {}
        """Each running request's latest token time (the next token's ITL starts there)."""

    def tokens(self, reqs: Iterable[str], t: float) -> None:
        """`reqs` got a token at `t` (a step's sampled requests), in that order."""
        last, itl = self.last_token_t, self.itl
        # Most got their last token at the same step before: one gap, rounded once.
        gaps: dict[float, float] = {}
        for req in reqs:
            prev = last.get(req)
            if prev is not None:
                gap = gaps.get(prev)
                if gap is None:
                    gap = gaps[prev] = round(t - prev, 6)
                itl.append(gap)
            last[req] = t

    def summary(self, t: float, totals: Mapping[str, int], kv_peak: int) -> LatencySummary:
        """Quantiles of the latest samples; throughput over the session's `t` seconds and
        its `totals` (output_tokens, preemptions, steps) and `kv_peak`."""
        elapsed = max(t, 1e-9)
        return {
            "ttft": _quantiles(self.ttft),
            "itl": _quantiles(self.itl),
            "queue": _quantiles(self.queue),
            "e2e": _quantiles(self.e2e),
            "finished": len(self.e2e),
            "throughput_tok_s": round(totals["output_tokens"] / elapsed, 3),
            "preemptions": totals["preemptions"],
            "kv_peak": kv_peak,
            "steps": totals["steps"],
        }


def _quantiles(values: deque[float]) -> Quantiles:
    if not values:
        return {"p50": None, "p95": None, "p99": None}
    ordered = sorted(values)
    last = len(ordered) - 1

    def q(p: float) -> float:
        return round(ordered[min(last, round(p * last))], 6)

    return {"p50": q(0.50), "p95": q(0.95), "p99": q(0.99)}
