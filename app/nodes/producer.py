"""`batchscope engine --push`: run the engine headless and push its frames to a dashboard.

The engine thread only puts converted frames on a SimpleQueue (never blocks). The asyncio
side keeps a bounded history of recent frames: while the dashboard is away it buffers,
counts what falls out of the buffer, and on reconnect resends everything after the seq
the dashboard says it has. Control commands come back over the same socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import queue
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import websockets

from app.nodes.commands import PAUSED_AFTER, error_detail, to_command
from app.protocol.convert import event_to_frame
from engine.engine import Engine
from engine.engine_core import EngineCore
from engine.events import Event
from protocol import control
from protocol.codes import MessageType
from protocol.envelope import encode, envelope
from protocol.session import new_session_id, node_opened

log = logging.getLogger("batchscope.engine")

SEND_INTERVAL_S = 0.03
STATS_INTERVAL_S = 1.0


class QueueSink:
    """EventSink for the engine thread: convert and enqueue, nothing else."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[tuple[str, Mapping[str, Any]]] = queue.SimpleQueue()

    def emit(self, event: Event) -> None:
        frame_type, data = event_to_frame(event)
        if frame_type != "engine_snapshot":
            self.queue.put((frame_type, data))

    def drain(self) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """(Any thread) the frames queued so far, oldest first."""
        while True:
            try:
                yield self.queue.get_nowait()
            except queue.Empty:
                return


@dataclass
class ProducerStats:
    produced: int = 0
    sent: int = 0
    dropped: int = 0
    connects: int = 0


class Producer:
    def __init__(
        self,
        engine: Engine,
        sink: QueueSink,
        url: str,
        token: str,
        node: str,
        announce: Mapping[str, Any],
        buffer_frames: int = 20_000,
        core: EngineCore | None = None,
    ) -> None:
        self.engine = engine
        self.sink = sink
        self.url = url
        self.token = token
        self.node = node
        self.announce = announce
        self.session = new_session_id()
        self.resume_key: str | None = None
        """Issued by the dashboard with the first welcome: resuming the session needs it."""
        self.core = core or EngineCore(engine)
        self.history: deque[tuple[int, str]] = deque(maxlen=buffer_frames)
        self.seq = 0
        self.cursor = 0
        self.stats = ProducerStats()
        self._req_ids = itertools.count(1)
        # The session's first frame, as a local session's: who we are and our knobs.
        self.sink.queue.put(("session", node_opened(node, announce)))

    def _collect(self) -> None:
        """Move new frames from the engine thread into the bounded history."""
        for frame_type, data in self.sink.drain():
            self.seq += 1
            if len(self.history) == self.history.maxlen:
                self.stats.dropped += 1
            text = envelope(frame_type, self.session, self.seq, encode(data))
            self.history.append((self.seq, text))
            self.stats.produced += 1

    async def run(self, stop: asyncio.Event) -> None:
        self.core.start()
        backoff = 0.2
        collector = asyncio.create_task(self._collect_forever(stop))
        try:
            while not stop.is_set():
                try:
                    await self._session(stop)
                    backoff = 0.2
                except (OSError, websockets.WebSocketException, TimeoutError) as exc:
                    log.warning(
                        "dashboard unreachable (%s); buffering %d frames",
                        exc,
                        self.seq - self.cursor,
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff)
                backoff = min(backoff * 2, 5.0)
        finally:
            collector.cancel()
            self.core.stop()

    async def _collect_forever(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self._collect()
            await asyncio.sleep(SEND_INTERVAL_S)

    async def _session(self, stop: asyncio.Event) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with websockets.connect(self.url, additional_headers=headers, max_size=8 << 20) as ws:
            hello = control.announce(self.session, self.node)
            if self.resume_key:
                hello["resume_key"] = self.resume_key
            await ws.send(json.dumps({**self.announce, **hello}))
            welcome = json.loads(await asyncio.wait_for(ws.recv(), 10))
            if welcome.get("type") != MessageType.WELCOME:
                raise OSError(f"dashboard refused: {welcome}")
            self.cursor = int(welcome.get("last_seq") or 0)
            self.resume_key = welcome.get("resume_key") or self.resume_key
            self.stats.connects += 1
            log.info(
                "pushing session %s to %s (resuming after seq %d)",
                self.session,
                self.url,
                self.cursor,
            )
            receiver = asyncio.create_task(self._receive(ws))
            try:
                await self._send_loop(ws, stop, receiver)
            finally:
                receiver.cancel()

    async def _send_loop(self, ws: Any, stop: asyncio.Event, receiver: asyncio.Task[None]) -> None:
        last_stats = 0.0
        while not stop.is_set() and not receiver.done():
            self._collect()
            batch = [text for seq, text in self.history if seq > self.cursor]
            if batch:
                await ws.send("[" + ",".join(batch) + "]")
                self.cursor = self.history[-1][0]
                self.stats.sent += len(batch)
            now = time.monotonic()
            if now - last_stats >= STATS_INTERVAL_S:
                stats = control.stats(self.seq - self.cursor, self.stats.dropped)
                await ws.send(json.dumps(stats))
                last_stats = now
            await asyncio.sleep(SEND_INTERVAL_S)
        if receiver.done() and receiver.exception():
            raise OSError(str(receiver.exception()))

    async def _receive(self, ws: Any) -> None:
        async for text in ws:
            msg = json.loads(text)
            if msg.get("type") == MessageType.COMMAND:
                reply = await self._command(msg)
                await ws.send(json.dumps(reply))
            elif msg.get("type") == MessageType.ERROR:
                log.warning("dashboard says: %s", msg.get("detail"))

    async def _command(self, msg: Mapping[str, Any]) -> control.Reply:
        kind, args = msg.get("kind"), msg.get("args") or {}
        try:
            command, result_of = to_command(kind, args, self._next_req_id)
            result = await asyncio.wrap_future(self.core.submit(command))
        except Exception as exc:
            return control.reply_error(msg.get("id"), error_detail(exc))
        if kind in PAUSED_AFTER:
            self.sink.queue.put(("session", {"event": "state", "paused": PAUSED_AFTER[kind]}))
        return control.reply_ok(msg.get("id"), result_of(result))

    def _next_req_id(self) -> str:
        return f"{self.node}-{next(self._req_ids)}"
