"""A remote producer as the dashboard knows it: its session, liveness and counters (what
the nodes page shows), and the control commands sent back to it, answered by id.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from typing_extensions import TypedDict

from app.nodes.replies import Channel, Replies

COMMAND_TIMEOUT_S = 15.0


class NodeUnavailable(RuntimeError):
    pass


class NodeView(TypedDict):
    """A producer as the nodes page and /api/nodes show it."""

    node: str
    session: str
    engine: str
    model: str
    state: str
    """`live`, `disconnected` (it may come back) or `ended` (see end_reason)."""
    end_reason: str | None
    """Why the session ended: `shutdown` (the producer closed it, e.g. a clean vLLM
    stop), `vanished` (disconnected longer than `node_gone_after_s`), ..."""
    observer_errors: int
    """Failures inside the producer's observation hooks (a vLLM node's adapter stops
    observing at the first one and keeps serving)."""
    degraded: dict[str, int]
    """A vLLM node's observations skipped because its release lacks an attribute they
    read (name -> times skipped); the rest is observed."""
    since: float
    frames: int
    frames_per_s: float
    last_seq: int
    invalid: int
    gaps: int
    missing: int
    lag: int
    """Frames the producer holds that the dashboard has not received."""
    dropped_by_producer: int
    unstored: int
    """Frames accepted but refused by the database (set aside; see last_error)."""
    last_error: str | None


@dataclass
class RemoteNode:
    """A producer: its session, liveness and counters (the nodes view)."""

    node: str
    session: str
    engine: str
    model: str
    connected: bool = True
    since: float = field(default_factory=time.time)
    last_seq: int = 0
    frames: int = 0
    invalid: int = 0
    gaps: int = 0
    missing: int = 0
    producer_buffered: int = 0
    producer_dropped: int = 0
    unstored: int = 0
    last_error: str | None = None
    ended: str | None = None
    """The session's end reason, once it ended (`shutdown`, `vanished`, ...)."""
    observer_errors: int = 0
    degraded: dict[str, int] = field(default_factory=dict)
    rate: float = 0.0
    _rate_t: float = field(default_factory=time.monotonic)
    _rate_n: int = 0
    ws: Channel | None = None
    replies: Replies = field(default_factory=Replies)

    def view(self) -> NodeView:
        return {
            "node": self.node,
            "session": self.session,
            "engine": self.engine,
            "model": self.model,
            "state": "ended" if self.ended else "live" if self.connected else "disconnected",
            "end_reason": self.ended,
            "observer_errors": self.observer_errors,
            "degraded": dict(self.degraded),
            "since": self.since,
            "frames": self.frames,
            "frames_per_s": round(self.rate, 2),
            "last_seq": self.last_seq,
            "invalid": self.invalid,
            "gaps": self.gaps,
            "missing": self.missing,
            "lag": self.producer_buffered,
            "dropped_by_producer": self.producer_dropped,
            "unstored": self.unstored,
            "last_error": self.last_error,
        }

    def tick(self) -> None:
        self._rate_n += 1
        now = time.monotonic()
        if now - self._rate_t >= 1.0:
            self.rate = self._rate_n / (now - self._rate_t)
            self._rate_t, self._rate_n = now, 0

    async def command(self, kind: str, **args: Any) -> Any:
        """Send a control command to the producer and await its reply."""
        if not self.connected or self.ws is None:
            raise NodeUnavailable(f"node {self.node!r} is disconnected")
        try:
            return await self.replies.call(self.ws, kind, args, COMMAND_TIMEOUT_S)
        except TimeoutError:
            raise NodeUnavailable(f"node {self.node!r} did not answer in time") from None
