"""How the dashboard takes in its own engine process's frames (app.nodes.local_engine): at
a share of the event loop (DutyCycle), and acknowledged a few at a time (FrameAcks), so the
engine process keeps only a window of frames unacknowledged on the link and holds or drops
the rest (app.nodes.engine_host).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from app.nodes.link import Link, LinkClosed
from protocol import control
from protocol.envelope import encode

LINES_PER_TURN = 8
INTAKE_SHARE = 0.7
"""Of each INTAKE_WINDOW_S, the share the intake may keep the event loop while frames wait
and anyone else wants the loop (app.edge.loop_demand); viewers and pages have the rest (15
ms of every 50), and a command ends a rest at once. With nobody connected it does not rest.
At 0.4 a flat-out simulation spent most of its time waiting on a dashboard that rested
(5,000 trace requests recorded in 79 s; 0.7 with AHEAD_FRAMES 32: 54 s)."""
INTAKE_WINDOW_S = 0.05
ACK_EVERY = 16
"""Frames folded between acks (the engine keeps at most a window of 64 unacknowledged:
app.nodes.link_outbox.WINDOW_FRAMES)."""
ACK_IDLE_S = 0.01
"""A frame folded but not yet acknowledged is acknowledged this soon anyway."""


class DutyCycle:
    """Keeps a busy task to `share` of each `window_s`: `used(busy)` says how long to rest."""

    def __init__(self, share: float, window_s: float) -> None:
        self.share = share
        self.window_s = window_s
        self.start = time.perf_counter()
        self.busy = 0.0

    def used(self, busy: float) -> float:
        now = time.perf_counter()
        if now - self.start >= self.window_s:
            self.start, self.busy = now, 0.0
        self.busy += busy
        if self.busy < self.share * self.window_s:
            return 0.0
        rest = self.start + self.window_s - now
        self.start, self.busy = now + max(rest, 0.0), 0.0
        return max(rest, 0.0)


class FrameAcks:
    """The live session's frames taken in, and what the engine process was told of them."""

    def __init__(self) -> None:
        self.taken = 0
        """The newest seq of the live session's frames taken in (folded or refused)."""
        self.acked: tuple[str | None, int] = (None, 0)
        """The (session, seq) last acknowledged to the engine process."""

    def unacked(self, session: str | None) -> int:
        acked_session, seq = self.acked
        return self.taken - (seq if acked_session == session else 0)

    async def send(self, link: Link, session: str | None) -> None:
        """Tell the engine process which frames are folded: it sends a window past that."""
        seq = self.taken
        self.acked = (session, seq)
        await link.send_text(encode(control.ack(session, seq)))

    async def send_idle(self, link: Link, session_of: Callable[[], str | None]) -> None:
        """Acknowledge the tail of a burst (fewer than ACK_EVERY frames) too."""
        with contextlib.suppress(LinkClosed):
            while True:
                await asyncio.sleep(ACK_IDLE_S)
                if (session_of(), self.taken) != self.acked:
                    await self.send(link, session_of())
