"""HubSink, for bench.recording_bench's in-process baseline (the dashboard's own engine
runs in a process of its own: app.nodes.engine_host): an EventSink on an engine thread. It
converts and JSON-encodes each event on the engine thread, queues it, and wakes the event
loop at most once per batch; the loop publishes queued frames in slices. The engine never
blocks: if the loop falls too far behind, frames are dropped, counted, and a visible `gap`
mark is published once the loop catches up (never a silent hole).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from typing import Any

from app.frames.convert import event_to_frame
from app.live.hub import EventHub
from engine.events import Event
from protocol.envelope import encode

MAX_BACKLOG = 50_000
SLICE = 200


class HubSink:
    def __init__(self, hub: EventHub, loop: asyncio.AbstractEventLoop, session: str) -> None:
        self.hub = hub
        self.loop = loop
        self.session = session
        self.closed = False
        self.dropped = 0
        self._pending: deque[tuple[str, Mapping[str, Any], str]] = deque()
        self._scheduled = False
        self._unreported_drops = 0

    def emit(self, event: Event) -> None:
        if self.closed:
            return
        frame_type, data = event_to_frame(event)
        if len(self._pending) >= MAX_BACKLOG:
            self.dropped += 1
            self._unreported_drops += 1
            return
        self._pending.append((frame_type, data, encode(data)))
        if not self._scheduled:
            self._scheduled = True
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop is closed: the app is shutting down
                self.closed = True

    def _drain(self) -> None:
        """On the loop: publish a slice of queued frames, then yield to other work."""
        self._scheduled = False
        if self.session not in self.hub.sessions:
            self._pending.clear()
            return
        for _ in range(SLICE):
            try:
                frame_type, data, data_json = self._pending.popleft()
            except IndexError:
                break
            self.hub.publish(self.session, frame_type, data, data_json=data_json)
        if self._unreported_drops and not self._pending:
            dropped, self._unreported_drops = self._unreported_drops, 0
            self.hub.publish(
                self.session,
                "session",
                {
                    "event": "gap",
                    "dropped_frames": dropped,
                    "reason": "the web side fell behind the engine",
                },
            )
        if self._pending and not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._drain)
