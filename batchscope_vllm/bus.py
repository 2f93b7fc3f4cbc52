"""The sender over a NATS JetStream fleet bus (BATCHSCOPE_BUS=nats://HOST:PORT; docs/fleet.md).

The same sender thread as over a websocket (sender.py: the engine thread only appends to
its intake; this thread builds frames and hands them to the producer core, which numbers
them and keeps the history, bounded in bytes), with another transport, run by an asyncio
loop of this thread's own, so vLLM's engine loop never waits on NATS:
- every step's summary (protocol.bus) goes out on `batchscope.<node>.summary`, every
  0.25 s, fire and forget (what the client cannot take is counted as lost);
- full frames stay in the history, which is this node's flight recorder, and are published
  on `.frames` (JetStream-acked; what the bus did not store is published again) while a
  dashboard holds a detail lease, for an incident window, or always with
  BATCHSCOPE_BUS_DETAIL=always;
- `.control` answers detail leases and windows; commands are refused, as over a websocket.
The bus away is an outage, not the end: the client reconnects, the history buffers.
Needs nats-py (`pip install './packaging/batchscope-vllm[bus]'`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError

from batchscope_vllm.sender import REFUSAL, SEND_INTERVAL_S, Sender
from protocol import control
from protocol.bus import (
    MAX_MSG_BYTES,
    Detail,
    frames_message,
    step_summary,
    stream_fields,
    subject,
)
from protocol.codes import FrameType, MessageType
from protocol.tasks import cancel_and_wait

log = logging.getLogger("batchscope_vllm")

SUMMARY_INTERVAL_S = 0.25
PUBLISH_TIMEOUT_S = 2.0
MAX_SUMMARIES = 20_000
"""Summary rows kept while the bus is away; past it the oldest are dropped (counted)."""


class BusSender(Sender):
    def __init__(self, url: str, node: str, announce: dict[str, Any], detail: str = "on-demand",
                 **kwargs: Any) -> None:  # fmt: skip
        self.summaries: list[list[float | int]] = []
        self.summaries_lost = 0
        self.summaries_sent = 0
        super().__init__(url, "", node, announce, **kwargs)
        self.detail = Detail(always=detail == "always")
        """Who is owed the full frames, and through which seq the bus has them."""
        self.nc: Client | None = None
        self.js: JetStreamContext | None = None

    # ------------------------------------------------------------ frames
    def _add(self, frame_type: str, data: Mapping[str, Any]) -> None:
        super()._add(frame_type, data)
        if frame_type == FrameType.ITERATION:
            self.summaries.append(step_summary(data, self.frames.times[-1]))
            if len(self.summaries) > MAX_SUMMARIES:
                del self.summaries[0]
                self.summaries_lost += 1

    def _detailing(self) -> bool:
        return self.detail.detailing(time.time())

    def delivered(self) -> bool:
        sent_all = self.frames.sent >= self.frames.seq
        return not self.queue and self._ended and not self.summaries and sent_all

    # ------------------------------------------------------------ transport
    def _loop(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        backoff = 0.2
        while self.nc is None and not self._done():
            # The client retries a bus that is away until it answers: meanwhile, keep
            # building into the history (and see a close request).
            connecting = asyncio.create_task(self._connect())
            while not connecting.done() and not self._done():
                await self._tick()
            if not connecting.done():
                # One cancel may be lost (nats-py retries a refused connect forever, and
                # Python 3.11's wait_for can turn the cancel into that refusal): insist.
                await cancel_and_wait([connecting])
                break
            exc = connecting.exception()
            if exc is not None:
                self._problem(f"bus {self.url} refused ({type(exc).__name__}: {exc})")
                until = time.monotonic() + backoff
                while time.monotonic() < until and not self._done():
                    await self._tick()
                backoff = min(backoff * 2, 5.0)
        last_summary = 0.0
        while not self._done():
            await self._tick()
            if time.monotonic() - last_summary >= SUMMARY_INTERVAL_S:
                await self._publish_summaries()
                last_summary = time.monotonic()
            await self._flush_frames(time.monotonic() + 1.0)
        await self._finish()

    async def _tick(self) -> None:
        await asyncio.sleep(SEND_INTERVAL_S)
        self._pump(0)

    async def _connect(self) -> None:
        nc = await nats.connect(
            self.url,
            name=f"batchscope-vllm-{self.node}",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            connect_timeout=3,
            pending_size=8 << 20,
            error_cb=self._quiet,
        )
        try:
            js = nc.jetstream(timeout=PUBLISH_TIMEOUT_S)
            await _ensure_streams(js)
            body = {**self.announce, "session": self.session, "node": self.node}
            await js.publish(subject(self.node, "announce"), json.dumps(body).encode())
            await nc.subscribe(subject(self.node, "control"), cb=self._on_control)
        except BaseException:
            with contextlib.suppress(Exception):
                await nc.close()
            raise
        self.nc, self.js = nc, js
        self.frames.connects += 1
        self._last_problem = ""
        log.info("batchscope: publishing session %s to the bus %s", self.session, self.url)

    async def _quiet(self, exc: Exception) -> None:
        self._problem(f"bus {self.url} unreachable ({type(exc).__name__})")

    async def _finish(self) -> None:
        """The session's end: its last summaries, and its last frames wherever a
        dashboard has followed it; then the connection drains."""
        self._pump(0)
        if self.detail.cursor > 0:
            self.detail.stop_at = self.seq
        await self._publish_summaries()
        await self._flush_frames(self._deadline)
        if self.delivered():
            self._flushed.set()
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.nc.drain(), 2.0)

    def _bus_stats(self) -> dict[str, Any]:
        return {
            "buffered": self.seq - self.detail.cursor,
            "dropped": self.dropped,
            "summaries_lost": self.summaries_lost,
            "observer_errors": self.observer_errors,
            "degraded": dict(self.degraded),
        }

    async def _publish_summaries(self) -> None:
        if self.nc is None or not self.summaries or not self.nc.is_connected:
            return
        rows, self.summaries = self.summaries, []
        body = {"node": self.node, "session": self.session, "seq": self.seq, "steps": rows}
        try:
            await self.nc.publish(subject(self.node, "summary"), json.dumps(body).encode())
            self.summaries_sent += len(rows)
        except Exception as exc:
            self.summaries_lost += len(rows)
            log.debug("batchscope: summaries lost: %s", exc)

    async def _flush_frames(self, deadline: float) -> None:
        """Publish the history after the cursor while detailing (until `deadline`)."""
        if self.js is None:
            return  # (never on the bus: nothing is delivered)
        detail = self.detail
        while self._detailing() and time.monotonic() < deadline:
            batch = self.frames.after(detail.cursor, MAX_MSG_BYTES)
            if not batch:  # all sent: what is left after the cursor are holes
                detail.cursor = self.seq
                break
            last = batch[-1][0]
            body, msg_id = frames_message(
                self.node, self.session, detail.prev_stored, batch, self._bus_stats()
            )
            try:
                await self.js.publish(
                    subject(self.node, "frames"), body, headers={"Nats-Msg-Id": msg_id}
                )
            except Exception as exc:  # the bus is away: the history keeps them
                self._problem(f"frames not stored on the bus ({type(exc).__name__}: {exc})")
                await asyncio.sleep(0.2)
                return
            detail.stored(last)
        if not self._detailing() or detail.cursor >= self.seq:
            self.frames.mark_sent(self.seq)  # nothing more is owed to the bus now

    # ------------------------------------------------------------ control
    async def _on_control(self, msg: Msg) -> None:
        try:
            req = json.loads(msg.data)
        except ValueError:
            req = None
        reply = self._control(req) if isinstance(req, dict) else None
        if reply is None:
            reply = {"type": MessageType.ERROR, "detail": "control: expected a JSON object"}
        with contextlib.suppress(Exception):
            await msg.respond(json.dumps(reply).encode())

    def _control(self, req: dict[str, Any]) -> dict[str, Any]:
        kind = req.get("type")
        if kind == MessageType.COMMAND:
            return dict(control.reply_error(req.get("id"), REFUSAL))
        self._pump(0)
        return self.detail.answer(req, self.frames, time.time())


async def _ensure_streams(js: JetStreamContext) -> None:
    """Create the bus's streams if no dashboard has yet (an existing one keeps its limits)."""
    for name, fields in stream_fields(3600.0, 1 << 30):
        try:
            await js.stream_info(name)
        except NotFoundError:
            config = api.StreamConfig(
                name=name, storage=api.StorageType.FILE, discard=api.DiscardPolicy.OLD, **fields
            )
            try:
                await js.add_stream(config)
            except Exception:  # another process created it first
                await js.stream_info(name)
