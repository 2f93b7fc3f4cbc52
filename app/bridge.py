"""HubSink: the engine thread's EventSink. It converts an event to wire data and hops to
the event loop with call_soon_threadsafe; it never blocks the engine thread.
"""

from __future__ import annotations

import asyncio

from app.hub import EventHub
from app.schemas import event_to_frame
from engine.events import Event


class HubSink:
    def __init__(self, hub: EventHub, loop: asyncio.AbstractEventLoop, session: str) -> None:
        self.hub = hub
        self.loop = loop
        self.session = session
        self.closed = False

    def emit(self, event: Event) -> None:
        if self.closed:
            return
        frame_type, data = event_to_frame(event)
        if frame_type == "engine_snapshot":
            return
        try:
            self.loop.call_soon_threadsafe(self.hub.publish, self.session, frame_type, data)
        except RuntimeError:  # the loop is closed: the app is shutting down
            self.closed = True
