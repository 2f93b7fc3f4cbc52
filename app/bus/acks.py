"""Acking the fleet bus's frames messages only once they are recorded (app.bus.intake): a
message is acked once the recorder has written every frame accepted up to it, never before,
so a dashboard killed at any moment loses nothing the bus kept (what it had not recorded is
delivered again; what it had is skipped by seq)."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from app.live.hub import EventHub
from app.records.recorder import Recorder

if TYPE_CHECKING:  # nats is imported at start(): a dashboard without a bus never loads it
    from nats.aio.msg import Msg

log = logging.getLogger("batchscope.bus")

ACK_INTERVAL_S = 0.1


class DurableAcks:
    """Messages taken in and not acked yet, each with the count of frames accepted by then."""

    def __init__(self, hub: EventHub, recorder: Recorder) -> None:
        self.hub, self.recorder = hub, recorder
        self.accepted = 0
        """Frames the hub has published (not relayed ones: another dashboard records them)."""
        self._unacked: deque[tuple[int, Msg]] = deque()
        hub.add_listener(self._count)

    def _count(self, session: str, *_: Any) -> None:
        if not self.hub.is_relayed(session):
            self.accepted += 1

    def __len__(self) -> int:
        return len(self._unacked)

    def hold(self, msg: Msg) -> None:
        """Ack `msg` once every frame accepted so far is recorded."""
        self._unacked.append((self.accepted, msg))

    def durable(self) -> int:
        """How many accepted frames are in the database (the recorder writes in order)."""
        return self.accepted - self.recorder.lag

    async def forever(self) -> None:
        while True:
            await asyncio.sleep(ACK_INTERVAL_S)
            await self.flush()

    async def flush(self) -> None:
        durable = self.durable()
        while self._unacked and self._unacked[0][0] <= durable:
            msg = self._unacked.popleft()[1]
            try:
                await msg.ack()
            except Exception as exc:  # not acked: delivered again, skipped by seq
                log.debug("ack: %s", exc)
