"""`batchscope engine --push`: run the engine headless and push its frames to a dashboard.

The engine thread only puts converted frames on a SimpleQueue (never blocks). The asyncio
side keeps a bounded history of recent frames: while the dashboard is away it buffers,
counts what falls out of the buffer, and on reconnect resends everything after the seq
the dashboard says it has. Control commands come back over the same socket. Stopped
(SIGINT, SIGTERM) while connected, it ends the session: the requests in flight are
recorded as aborted, then a closing frame (reason `shutdown`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import queue
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import websockets

from app.frames.convert import event_to_frame
from app.nodes.commands import PAUSED_AFTER, error_detail, to_command
from engine.engine import Engine
from engine.engine_core import EngineCore
from engine.events import Event
from protocol import control
from protocol.codes import FrameType, MessageType, SessionEvent
from protocol.envelope import encode
from protocol.producer import ProducerCore
from protocol.session import new_session_id, node_opened

log = logging.getLogger("batchscope.engine")

SEND_INTERVAL_S = 0.03
STATS_INTERVAL_S = 1.0


class TokenRefused(ConnectionError):
    """The dashboard refused our token at the ingest handshake (HTTP 401/403): retrying
    cannot help, so the engine stops and says so."""


class QueueSink:
    """EventSink for the engine thread: convert and enqueue, nothing else."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[tuple[str, Mapping[str, Any]]] = queue.SimpleQueue()

    def emit(self, event: Event) -> None:
        frame_type, data = event_to_frame(event)
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
        buffer_s: float | None = None,
    ) -> None:
        self.engine = engine
        self.sink = sink
        self.url = url
        self.token = token
        self.node = node
        self.announce = announce
        self.frames = ProducerCore(
            new_session_id(), node, max_frames=buffer_frames, max_age_s=buffer_s
        )
        """The session's seq, its recent frames (the last `buffer_frames`, and with
        `buffer_s` no older than that), what was lost, and the handshake."""
        self.core = core or EngineCore(engine)
        self.stats = ProducerStats()
        self._req_ids = itertools.count(1)
        # The session's first frame, as a local session's: who we are and our knobs.
        self.sink.queue.put((FrameType.SESSION, node_opened(node, announce)))

    @property
    def session(self) -> str:
        return self.frames.session

    def _collect(self) -> None:
        """Move new frames from the engine thread into the bounded history."""
        add = self.frames.add
        for frame_type, data in self.sink.drain():
            add(frame_type, encode(data))
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
                except websockets.InvalidStatus as exc:
                    status = exc.response.status_code
                    if status in (401, 403):
                        raise TokenRefused(
                            f"the dashboard at {self.url} refused the token (HTTP {status}): "
                            "give --token the one `batchscope serve` printed"
                        ) from None
                    log.warning(
                        "dashboard unreachable (%s); buffering %d frames",
                        exc,
                        self.frames.buffered,
                    )
                except (OSError, websockets.WebSocketException, TimeoutError) as exc:
                    log.warning(
                        "dashboard unreachable (%s); buffering %d frames",
                        exc,
                        self.frames.buffered,
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
            await ws.send(json.dumps(self.frames.hello(self.announce)))
            self.frames.welcome(json.loads(await asyncio.wait_for(ws.recv(), 10)))
            log.info(
                "pushing session %s to %s (resuming after seq %d)",
                self.session,
                self.url,
                self.frames.sent,
            )
            receiver = asyncio.create_task(self._receive(ws))
            try:
                await self._send_loop(ws, stop, receiver)
            finally:
                receiver.cancel()

    async def _send_loop(self, ws: Any, stop: asyncio.Event, receiver: asyncio.Task[None]) -> None:
        last_stats = 0.0
        while not stop.is_set() and not receiver.done():
            await self._flush(ws)
            now = time.monotonic()
            if now - last_stats >= STATS_INTERVAL_S:
                await ws.send(json.dumps(self.frames.stats()))
                last_stats = now
            await asyncio.sleep(SEND_INTERVAL_S)
        if stop.is_set():
            await self._close(ws)
        if receiver.done() and receiver.exception():
            raise OSError(str(receiver.exception()))

    async def _close(self, ws: Any) -> None:
        """A clean stop while connected: the engine stops (aborting what is in flight,
        Engine.stop), and its last frames and a closing one (reason `shutdown`) go out."""
        await asyncio.to_thread(self.core.stop)
        self.sink.queue.put(
            (FrameType.SESSION, {"event": SessionEvent.CLOSED, "reason": "shutdown"})
        )
        await self._flush(ws)

    async def _flush(self, ws: Any) -> None:
        """The engine's new frames into the core, and every frame not yet sent out as one
        JSON array."""
        self._collect()
        batch = self.frames.pending()
        if batch:
            await ws.send("[" + ",".join(text for _, text in batch) + "]")
            self.frames.mark_sent(batch[-1][0])
            self.stats.sent += len(batch)

    async def _receive(self, ws: Any) -> None:
        async for text in ws:
            msg = json.loads(text)
            kind = msg.get("type")
            handle = DASHBOARD_MESSAGES.get(kind) if isinstance(kind, str) else None
            if handle is not None:
                await handle(self, ws, msg)

    async def _on_command(self, ws: Any, msg: Mapping[str, Any]) -> None:
        reply = await self._command(msg)
        await ws.send(json.dumps(reply))

    async def _on_error(self, ws: Any, msg: Mapping[str, Any]) -> None:
        del ws
        log.warning("dashboard says: %s", msg.get("detail"))

    async def _command(self, msg: Mapping[str, Any]) -> control.Reply:
        kind, args = msg.get("kind"), msg.get("args") or {}
        try:
            command, result_of = to_command(kind, args, self._next_req_id)
            result = await asyncio.wrap_future(self.core.submit(command))
        except Exception as exc:
            return control.reply_error(msg.get("id"), error_detail(exc))
        if kind in PAUSED_AFTER:
            self.sink.queue.put(
                (FrameType.SESSION, {"event": SessionEvent.STATE, "paused": PAUSED_AFTER[kind]})
            )
        return control.reply_ok(msg.get("id"), result_of(result))

    def _next_req_id(self) -> str:
        return f"{self.node}-{next(self._req_ids)}"


DASHBOARD_MESSAGES: dict[str, Callable[[Producer, Any, Mapping[str, Any]], Awaitable[None]]] = {
    MessageType.COMMAND.value: Producer._on_command,
    MessageType.ERROR.value: Producer._on_error,
}
"""The dashboard's messages on the socket (`ws`), by type (others are not for a producer)."""
