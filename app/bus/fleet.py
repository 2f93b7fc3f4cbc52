"""The fleet at a glance, folded from the nodes' per-step summaries: one row per node
(throughput, queue depth, KV use, preemptions, stalls) and the bus's own figures."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from typing_extensions import TypedDict

from protocol.bus import SUMMARY_FIELDS

WINDOW_S = 5.0
LAG_SAMPLES = 20_000
_I = {name: i for i, name in enumerate(SUMMARY_FIELDS)}


class FleetRow(TypedDict):
    node: str
    session: str
    step: int
    steps_per_s: float
    tokens_per_s: float
    """Scheduled tokens (prefill + decode) per second over the last few seconds."""
    running: int
    waiting: int
    kv_used: int
    kv_total: int
    kv_pct: float
    preemptions: int
    """Preemptions since this dashboard first heard of the node."""
    preemptions_recent: int
    stalls: int
    """Steps in the window in which requests waited and nothing at all was scheduled."""
    stalled_now: bool
    step_ms: float
    missed_steps: int
    """Steps whose summary never arrived (a gap in the node's step numbers)."""
    age_s: float
    """Seconds since the node's last summary."""


@dataclass
class NodeSummary:
    node: str
    session: str
    last: list[float | int] = field(default_factory=list)
    window: deque[tuple[float, int, int, int, int, float]] = field(default_factory=deque)
    """(t, steps, tokens, preempted, stalls, step ms sum) per summary message."""
    preemptions: int = 0
    missed_steps: int = 0
    seen_at: float = 0.0

    def fold(self, session: str, steps: list[list[float | int]], now: float) -> None:
        if session != self.session:
            self.session, self.last = session, []
        tokens = preempted = stalls = 0
        ms = 0.0
        for row in steps:
            if self.last and row[0] > self.last[0] + 1:
                self.missed_steps += int(row[0]) - int(self.last[0]) - 1
            tokens += int(row[_I["prefill_tokens"]]) + int(row[_I["decode_tokens"]])
            preempted += int(row[_I["preempted"]])
            stalls += int(row[_I["stalled"]])
            ms += float(row[_I["dur_ms"]])
            self.last = row
        self.preemptions += preempted
        self.window.append((now, len(steps), tokens, preempted, stalls, ms))
        while self.window and now - self.window[0][0] > WINDOW_S:
            self.window.popleft()
        self.seen_at = now

    def row(self, now: float) -> FleetRow:
        last = self.last
        span = max(1.0, now - self.window[0][0]) if self.window else 1.0
        steps = sum(w[1] for w in self.window)
        kv_used = int(last[_I["kv_used"]]) if last else 0
        kv_total = int(last[_I["kv_total"]]) if last else 0
        return {
            "node": self.node,
            "session": self.session,
            "step": int(last[0]) if last else 0,
            "steps_per_s": round(steps / span, 2),
            "tokens_per_s": round(sum(w[2] for w in self.window) / span, 1),
            "running": int(last[_I["running"]]) if last else 0,
            "waiting": int(last[_I["waiting"]]) if last else 0,
            "kv_used": kv_used,
            "kv_total": kv_total,
            "kv_pct": round(100.0 * kv_used / kv_total, 1) if kv_total else 0.0,
            "preemptions": self.preemptions,
            "preemptions_recent": sum(w[3] for w in self.window),
            "stalls": sum(w[4] for w in self.window),
            "stalled_now": bool(last and last[_I["stalled"]]),
            "step_ms": round(sum(w[5] for w in self.window) / steps, 3) if steps else 0.0,
            "missed_steps": self.missed_steps,
            "age_s": round(now - self.seen_at, 2),
        }


class FleetView:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeSummary] = {}
        self.messages = 0
        self.steps = 0
        self.frames = 0
        self.lags: deque[float] = deque(maxlen=LAG_SAMPLES)
        self._rate: deque[tuple[float, int, int]] = deque()

    def fold(self, msg: dict[str, Any], now: float | None = None) -> bool:
        """One summary message `{node, session, steps: [[...]], ...}`; False if malformed."""
        now = time.time() if now is None else now
        node, session, steps = msg.get("node"), msg.get("session"), msg.get("steps")
        if not isinstance(node, str) or not isinstance(session, str):
            return False
        if not isinstance(steps, list) or not all(
            isinstance(r, list) and len(r) >= len(SUMMARY_FIELDS) for r in steps
        ):
            return False
        entry = self.nodes.get(node)
        if entry is None:
            entry = self.nodes[node] = NodeSummary(node[:100], session[:128])
        try:
            entry.fold(session[:128], steps, now)
        except (TypeError, ValueError):
            return False
        self.messages += 1
        self.steps += len(steps)
        if steps:
            self.lags.append(now - float(steps[-1][_I["t"]]))
        return True

    def count_frames(self, n: int) -> None:
        self.frames += n

    def rows(
        self, sort: str = "node", desc: bool = False, now: float | None = None
    ) -> list[FleetRow]:
        now = time.time() if now is None else now
        rows = [n.row(now) for n in self.nodes.values()]
        if sort not in FleetRow.__annotations__:
            sort = "node"
        rows.sort(key=lambda r: r[sort], reverse=desc)  # type: ignore[literal-required]
        return rows

    def stats(self) -> dict[str, Any]:
        """The bus as this dashboard sees it: totals, rates and end-to-end lag (step's
        frame leaving the engine -> folded here)."""
        now = time.monotonic()
        self._rate.append((now, self.steps, self.frames))
        while len(self._rate) > 2 and now - self._rate[0][0] > 10.0:
            self._rate.popleft()
        t0, s0, f0 = self._rate[0]
        span = now - t0
        lags = sorted(self.lags)

        def pct(p: float) -> float:
            return round(lags[min(len(lags) - 1, int(p * len(lags)))] * 1000, 1) if lags else 0.0

        return {
            "nodes": len(self.nodes),
            "messages": self.messages,
            "steps": self.steps,
            "frames": self.frames,
            "steps_per_s": round((self.steps - s0) / span, 1) if span > 0 else 0.0,
            "frames_per_s": round((self.frames - f0) / span, 1) if span > 0 else 0.0,
            "lag_p50_ms": pct(0.5),
            "lag_p99_ms": pct(0.99),
        }
