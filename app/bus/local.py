"""A dashboard's own engine on the fleet bus (`serve --bus`): the engine process stays on its
link to its dashboard, which records its sessions (once, as without a bus), and besides
publishes every step's summary on `batchscope.<node>.summary`, so it is a node on /fleet
like any `engine --bus` node.

Only summaries go out: full detail of this node is its own dashboard's recording, so a
detail or window request from another dashboard is answered with an error that says so.
The bus never holds up the engine or its link: summaries wait in a bounded list while the
bus is away (the oldest are dropped and counted past it) and go out every 0.25 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.bus.subjects import connect, ensure_streams
from protocol.bus import step_summary, subject
from protocol.codes import FrameType, MessageType
from protocol.tasks import cancel_and_wait

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg

log = logging.getLogger("batchscope.engine")

SUMMARY_INTERVAL_S = 0.25
CONNECT_RETRY_S = 1.0
MAX_ROWS = 20_000
"""Summaries kept while the bus is away; past it the oldest are dropped (counted)."""


class LocalSummaries:
    def __init__(self, url: str, node: str, limits: tuple[float, int] = (3600.0, 1 << 30)):
        self.url = url
        self.node = node
        self.limits = limits
        self.batches: list[tuple[str, int, list[list[float | int]]]] = []
        """(session, last seq, rows) waiting to be published, oldest first."""
        self.pending = 0
        self.published = 0
        self.lost = 0
        self.nc: Client | None = None

    # ------------------------------------------------------- the engine's side
    def tap(self, session: str, seq: int, frame_type: str, data: Mapping[str, Any]) -> None:
        """(The engine process's loop) one frame: an iteration's summary is kept to send."""
        if frame_type != FrameType.ITERATION:
            return
        try:
            row = step_summary(data, time.time())
        except (TypeError, ValueError, AttributeError):
            return
        if self.batches and self.batches[-1][0] == session:
            rows = self.batches[-1][2]
            self.batches[-1] = (session, seq, rows)
        else:
            rows = []
            self.batches.append((session, seq, rows))
        rows.append(row)
        self.pending += 1
        while self.pending > MAX_ROWS:
            oldest = self.batches[0][2]
            oldest.pop(0)
            self.pending -= 1
            self.lost += 1
            if not oldest:
                self.batches.pop(0)

    # ---------------------------------------------------------- the bus's side
    async def run(self, stop: asyncio.Event) -> None:
        """Connect (retrying while the bus is away), then publish until `stop`."""
        try:
            while not stop.is_set() and self.nc is None:
                # (The client waits for a bus that is away, retrying; `stop` ends that.)
                connecting = asyncio.create_task(self._connect())
                stopping = asyncio.create_task(stop.wait())
                await asyncio.wait((connecting, stopping), return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                if not connecting.done():
                    await cancel_and_wait([connecting])
                    return
                if connecting.exception() is not None:  # the engine runs on regardless
                    log.warning("bus %s: %s; retrying", self.url, connecting.exception())
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), CONNECT_RETRY_S)
            if self.nc is None:
                return
            log.info("publishing this engine's summaries to %s as node %s", self.url, self.node)
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), SUMMARY_INTERVAL_S)
                await self.publish()
        finally:
            await self.close()

    async def _connect(self) -> None:
        nc = await connect(self.url, f"batchscope-local-{self.node}")
        try:
            await ensure_streams(nc.jetstream(timeout=5.0), *self.limits)
            await nc.subscribe(subject(self.node, "control"), cb=self._on_control)
        except BaseException:
            with contextlib.suppress(Exception):
                await nc.close()
            raise
        self.nc = nc

    async def publish(self) -> None:
        """Send what waits, one message per session; fire and forget (the client buffers
        through a short outage; what it cannot take is counted as lost)."""
        if self.nc is None:
            return
        batches, self.batches, self.pending = self.batches, [], 0
        for session, seq, rows in batches:
            body = {
                "node": self.node,
                "session": session,
                "seq": seq,
                "steps": rows,
                "stats": {"summaries_lost": self.lost},
            }
            try:
                await self.nc.publish(subject(self.node, "summary"), json.dumps(body).encode())
                self.published += len(rows)
            except Exception as exc:
                self.lost += len(rows)
                log.debug("summaries lost: %s", exc)

    async def _on_control(self, msg: Msg) -> None:
        detail = (
            f"node {self.node!r} is a dashboard's own engine: only its summaries are on the "
            "bus; its full detail is recorded by that dashboard"
        )
        with contextlib.suppress(Exception):
            await msg.respond(json.dumps({"type": MessageType.ERROR, "detail": detail}).encode())

    async def close(self) -> None:
        if self.nc is None:
            return
        with contextlib.suppress(Exception):
            await self.publish()
            await asyncio.wait_for(self.nc.drain(), 5.0)
        self.nc = None
