"""`batchscope engine --bus nats://...`: the engine headless, publishing to the fleet bus.

Every step's summary goes out always (`batchscope.<node>.summary`, batched every 0.25 s).
Full frames are kept in the flight recorder and published (`.frames`, JetStream-acked)
while a dashboard holds a detail lease, or always with `detail="always"`. A frame the bus
did not store is published again from the flight recorder; one that left the recorder
first is a gap the dashboards mark. Requests arrive on `.control`: detail leases, incident
windows and the same commands as over /ws/ingest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any, Literal

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from app.bus.subjects import FIRST_CONNECT_S, connect, ensure_streams
from app.nodes.producer import Producer, QueueSink
from engine.engine import Engine
from engine.engine_core import EngineCore
from protocol.bus import MAX_MSG_BYTES, Detail, frames_message, step_summary, subject
from protocol.codes import FrameType, MessageType, SessionEvent
from protocol.control import Reply
from protocol.envelope import encode

log = logging.getLogger("batchscope.engine")

SUMMARY_INTERVAL_S = 0.25
FRAMES_INTERVAL_S = 0.05
PUBLISH_TIMEOUT_S = 2.0
DetailMode = Literal["always", "on-demand"]


class BusNode(Producer):
    def __init__(
        self,
        engine: Engine,
        sink: QueueSink,
        url: str,
        node: str,
        announce: dict[str, Any],
        core: EngineCore,
        detail: DetailMode = "on-demand",
        flight_frames: int = 50_000,
        flight_s: float = 300.0,
        max_age_s: float = 3600.0,
        max_bytes: int = 1 << 30,
    ) -> None:
        super().__init__(
            engine, sink, url, "", node, announce, flight_frames, core, buffer_s=flight_s
        )
        self.detail = Detail(always=detail == "always")
        """Who is owed the full frames, and through which seq the bus has them."""
        self.summaries: list[list[float | int]] = []
        self.summaries_lost = 0
        self.limits = (max_age_s, max_bytes)
        self.nc: Client | None = None
        self.js: JetStreamContext | None = None

    # ------------------------------------------------------------ engine side
    def _collect(self) -> None:
        """Frames from the engine thread into the flight recorder (the producer core's
        history, bounded by count and age); summaries aside."""
        now = time.time()
        add = self.frames.add
        for frame_type, data in self.sink.drain():
            add(frame_type, encode(data), now)
            self.stats.produced += 1
            if frame_type == FrameType.ITERATION:
                self.summaries.append(step_summary(data, now))

    # --------------------------------------------------------------- bus side
    async def run(self, stop: asyncio.Event) -> None:
        self.nc = await connect(self.url, f"batchscope-node-{self.node}", FIRST_CONNECT_S)
        self.js = self.nc.jetstream(timeout=PUBLISH_TIMEOUT_S)
        await ensure_streams(self.js, *self.limits)
        await self._publish_announce()
        await self.nc.subscribe(subject(self.node, "control"), cb=self._on_control)
        self.core.start()
        log.info("node %s publishing session %s to %s", self.node, self.session, self.url)
        tasks = [
            asyncio.create_task(self._summaries_forever(stop)),
            asyncio.create_task(self._frames_forever(stop)),
        ]
        try:
            await stop.wait()
        finally:
            self.core.stop()
            self.sink.queue.put(
                (FrameType.SESSION, {"event": SessionEvent.CLOSED, "reason": "shutdown"})
            )
            self._collect()
            for task in tasks:
                task.cancel()
            await self._flush_frames(deadline=time.monotonic() + 5.0)
            await self._publish_summaries()
            log.info(
                "node %s stopped: last seq %d, stored through %d, dropped %d",
                self.node,
                self.frames.seq,
                self.detail.cursor,
                self.frames.dropped,
            )
            with contextlib.suppress(Exception):
                await self.nc.drain()

    async def _publish_announce(self) -> None:
        assert self.js is not None
        body = json.dumps({**self.announce, "session": self.session, "node": self.node})
        for attempt in range(30):
            try:
                await self.js.publish(subject(self.node, "announce"), body.encode())
                return
            except Exception as exc:
                log.warning("announce not stored yet (%s); retrying", exc)
                await asyncio.sleep(min(0.2 * (attempt + 1), 2.0))
        raise OSError("the bus did not store the announce")

    async def _summaries_forever(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(SUMMARY_INTERVAL_S)
            self._collect()
            await self._publish_summaries()

    async def _publish_summaries(self) -> None:
        """Summaries are fire-and-forget (the client buffers through a short outage); what
        cannot be sent is counted, and dashboards see the steps it skipped."""
        if not self.summaries or self.nc is None:
            return
        rows, self.summaries = self.summaries, []
        body = {
            "node": self.node,
            "session": self.session,
            "seq": self.frames.seq,
            "steps": rows,
            "stats": self._stats(),
        }
        try:
            await self.nc.publish(subject(self.node, "summary"), json.dumps(body).encode())
        except Exception as exc:
            self.summaries_lost += len(rows)
            log.debug("summaries lost: %s", exc)

    def _stats(self) -> dict[str, int]:
        frames = self.frames
        return {
            "buffered": frames.seq - self.detail.cursor,
            "dropped": frames.dropped,
            "summaries_lost": self.summaries_lost,
            "flight_frames": len(frames),
        }

    def _detailing(self) -> bool:
        return self.detail.detailing(time.time())

    async def _frames_forever(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self._collect()
            await self._flush_frames(deadline=time.monotonic() + 1.0)
            await asyncio.sleep(FRAMES_INTERVAL_S)

    async def _flush_frames(self, deadline: float) -> None:
        """Publish stored frames after the cursor while detailing, until none is left or
        `deadline`."""
        detail, frames = self.detail, self.frames
        while self.js is not None and self._detailing() and time.monotonic() < deadline:
            batch = frames.after(detail.cursor, MAX_MSG_BYTES)
            if not batch:
                break
            first, last = batch[0][0], batch[-1][0]
            body, msg_id = frames_message(
                self.node, self.session, detail.prev_stored, batch, self._stats()
            )
            try:
                await self.js.publish(
                    subject(self.node, "frames"), body, headers={"Nats-Msg-Id": msg_id}
                )
            except Exception as exc:  # the bus is away: the flight recorder keeps them
                log.debug("frames %d-%d not stored yet: %s", first, last, exc)
                await asyncio.sleep(0.2)
                return
            detail.stored(last)
            self.stats.sent += len(batch)
        if not self._detailing() or detail.cursor >= frames.seq:
            frames.mark_sent(frames.seq)  # nothing more is owed to the bus now

    # ---------------------------------------------------------------- control
    async def _on_control(self, msg: Msg) -> None:
        try:
            req = json.loads(msg.data)
            reply = await self._control(req) if isinstance(req, dict) else None
        except ValueError:
            reply = None
        if reply is None:
            reply = {"type": MessageType.ERROR, "detail": "control: expected a JSON object"}
        with contextlib.suppress(Exception):
            await msg.respond(json.dumps(reply).encode())

    async def _control(self, req: dict[str, Any]) -> dict[str, Any] | Reply:
        kind = req.get("type")
        if kind == MessageType.COMMAND:
            return await self._command(req)
        self._collect()
        return self.detail.answer(req, self.frames, time.time())
