"""The engine process's frames on their way over the link to its dashboard
(app.nodes.engine_host): made on the engine thread (a QueueSink), numbered and encoded once
here, and sent as the dashboard's acks allow. The engine never waits on the link: frames the
dashboard does not take in time are dropped and counted, and the jump in seq is its visible
gap.

Flow control is a credit window: the dashboard acknowledges the frames it has folded
(`{"type": "ack", "session", "seq"}`), and at most WINDOW_FRAMES frames are on the link
unacknowledged; the rest wait in the outbox (a paced engine drops past MAX_OUTBOX). A
flat-out simulation waits while AHEAD_FRAMES of its frames are not folded yet (made,
waiting or on the link).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from app import fast_json
from app.nodes.link import Link
from app.nodes.producer import QueueSink
from protocol.envelope import encode
from protocol.producer import ProducerCore

SEND_INTERVAL_S = 0.01
STATS_INTERVAL_S = 0.25
WINDOW_FRAMES = 64
"""Frames on the link that the dashboard has not acknowledged yet, at most."""
AHEAD_FRAMES = 128
"""Frames of a flat-out simulation not folded yet (queued, waiting, on the link) before it
waits: what lies ahead of a command's reply, each a fold the dashboard makes first (about a
millisecond each at 256 running, so a reply waits ~0.1 s at most). At 32 (window 16, an
ack every 4 frames) the hand-overs between the processes were the pace: a flat-out
20,000-request recording took 325 s; at 128 (window 64, an ack every 16) 288 s."""
MAX_OUTBOX = 50_000
"""Frames waiting for the link; past it new frames are dropped (a gap the dashboard marks)."""
ACK_POLL_S = 0.002
COMMAND_FLUSH_S = 5.0
"""A reply waits at most this long for its command's frames to get through the window."""
NODE = "local"

FrameTap = Callable[[str, int, str, Mapping[str, Any]], None]
"""(session, seq, frame type, data) of every frame the engine made, dropped or not: what
else watches the engine (with --bus, the fleet bus's summaries: app.bus.local)."""


class LinkOutbox:
    """The current session's frames: the engine's sink, the outbox, the dashboard's acks."""

    def __init__(self, link: Link, tap: FrameTap | None = None) -> None:
        self.link = link
        self.tap = tap
        self.session: str | None = None
        self.sink = QueueSink()
        self.frames = ProducerCore("", NODE, keep_sent=False)
        """The session's seq and its outbox: frames not written to the link yet (`sent`:
        the newest seq written), the holes of what the outbox could not take."""
        self.acked = 0
        """The newest seq of this session the dashboard has folded (its last ack)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._frames_made = asyncio.Event()
        """Set (from the engine thread) when a flat-out engine has frames to send."""
        self._kicked = False

    def start(self, session: str) -> None:
        """A new session's frames (its engine's sink is new already): none sent, none acked."""
        self._loop = asyncio.get_running_loop()
        self.session = session
        self.frames = ProducerCore(session, NODE, keep_sent=False)
        self.acked = 0

    def backlogged(self) -> bool:
        """(Engine thread, before each step of a flat-out simulation) AHEAD_FRAMES frames
        are made but not folded by the dashboard yet: wait. Frames made since the last
        flush are sent now, not at the next tick: with so few in flight, the pipeline is
        only as fast as its hand-overs."""
        frames = self.frames
        waiting = self.sink.queue.qsize() + len(frames)
        if waiting and not self._kicked and self._loop is not None:
            self._kicked = True
            with contextlib.suppress(RuntimeError):  # the loop closed: the process ends
                self._loop.call_soon_threadsafe(self._frames_made.set)
        return waiting + frames.sent - self.acked >= AHEAD_FRAMES

    def window_left(self) -> int:
        """Frames the link may take now without overrunning the dashboard."""
        return WINDOW_FRAMES - (self.frames.sent - self.acked)

    def queue_frame(self, frame_type: str, data: Mapping[str, Any]) -> None:
        frames = self.frames
        if len(frames) >= MAX_OUTBOX:
            frames.hole()  # the dashboard sees the seq jump and marks the gap
        else:
            frames.add(frame_type, fast_json.dumps(data).decode())

    def collect(self) -> None:
        for frame_type, data in self.sink.drain():
            self.queue_frame(frame_type, data)
            if self.tap is not None and self.session is not None:
                self.tap(self.session, self.frames.seq, frame_type, data)

    async def flush(self, window: bool = True, then: str | None = None) -> None:
        """Send what waits, as far as the window allows (all of it at a session's end, or
        before a reply), and `then` (a reply) after it in the same write."""
        self.collect()
        frames = self.frames
        batch = frames.pending(limit=self.window_left() if window else None)
        lines = [text for _, text in batch]
        if batch:
            frames.mark_sent(batch[-1][0])
        if then is not None:
            lines.append(then)
        if lines:
            await self.link.send_lines(lines)

    async def flush_through(self, seq: int, timeout: float = COMMAND_FLUSH_S) -> None:
        """Send every frame up to `seq` (a command's own frames), as acks make room."""
        deadline = time.monotonic() + timeout
        await self.flush()
        while self.frames and self.frames.oldest <= seq and time.monotonic() < deadline:
            await asyncio.sleep(ACK_POLL_S)
            await self.flush()

    def on_ack(self, msg: Mapping[str, Any]) -> None:
        seq = msg.get("seq")
        if msg.get("session") == self.session and isinstance(seq, int) and seq > self.acked:
            self.acked = min(seq, self.frames.sent)

    async def send_forever(self, step: Callable[[], int]) -> None:
        """Send what waits each SEND_INTERVAL_S (at once when a flat-out engine made
        frames), and the stats (with the engine's `step()`) each STATS_INTERVAL_S."""
        last_stats = 0.0
        while True:
            self._kicked = False
            self._frames_made.clear()
            await self.flush()
            now = time.monotonic()
            if now - last_stats >= STATS_INTERVAL_S:
                stats = self.frames.stats()
                stats["step"] = step()
                await self.link.send_text(encode(stats))
                last_stats = now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._frames_made.wait(), SEND_INTERVAL_S)
