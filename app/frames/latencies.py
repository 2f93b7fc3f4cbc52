"""The latest latency samples of a session (seconds): what its latency summary reads."""

from __future__ import annotations

from collections import deque

LATENCY_SAMPLES = 4096


class Latencies:
    def __init__(self) -> None:
        self.ttft: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self.itl: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self.queue: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self.e2e: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self.last_token_t: dict[str, float] = {}
        """Each running request's latest token time (the next token's ITL starts there)."""

    def token(self, req: str, t: float) -> None:
        """`req` got a token at `t`."""
        prev = self.last_token_t.get(req)
        if prev is not None:
            self.itl.append(round(t - prev, 6))
        self.last_token_t[req] = t

    def samples(self) -> dict[str, list[float]]:
        return {
            "ttft": list(self.ttft),
            "itl": list(self.itl),
            "queue": list(self.queue),
            "e2e": list(self.e2e),
        }
