"""A dashboard's side of the fleet bus: two durable JetStream consumers (frames, summaries)
named after this dashboard, so several dashboards each see the whole fleet and a restarted
one resumes where it acked.

Frames go through the same intake as /ws/ingest (`NodeRegistry.receive`: seq checks, gap
marks, publish to the hub). A frames message is acked only once the recorder has written
every frame accepted up to it (app.bus.acks), so a dashboard killed at any moment loses
nothing the bus kept: what it had not recorded is delivered again, and what it had is
skipped by seq.
Each frames message names the last seq its node stored before it (`prev`): a message that
overtook an earlier one (lost in flight when the bus restarted, delivered again later) waits
for it instead of making a false gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session, sessionmaker

from app.bus.acks import DurableAcks
from app.bus.channel import BusChannel, ask_node
from app.bus.fleet import FleetView
from app.bus.subjects import FIRST_CONNECT_S, connect, ensure_streams, pull_consumer
from app.nodes.ingest import NodeRegistry
from app.nodes.ownership import restore_state
from app.nodes.remote_node import RemoteNode
from app.records.recorder import Recorder
from protocol.bus import NODES_STREAM, subject
from protocol.codes import MessageType
from protocol.tasks import cancel_and_wait

if TYPE_CHECKING:  # nats is imported at start(): a dashboard without a bus never loads it
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js import JetStreamContext

log = logging.getLogger("batchscope.bus")

FETCH = 128
FETCH_SUMMARIES = 1024
"""Summaries come in hundreds per second from a large fleet: fewer, larger pulls."""
HOLD_DELAY_S = 1.0
HOLD_DELIVERIES = 30
"""A frames message that overtook an earlier one (delivered but lost when the bus went
away: JetStream delivers it again after ack_wait) is sent back this many times, HOLD_DELAY_S
apart, before its frames are taken anyway and the hole is marked as a gap."""
FRAMES_ACK_WAIT_S = 10.0
LEASE_INTERVAL_S = 10.0
LEASE_S = 30.0


class BusIntake:
    def __init__(
        self,
        url: str,
        name: str,
        registry: NodeRegistry,
        recorder: Recorder,
        db: sessionmaker[Session],
        fleet: FleetView,
        limits: tuple[float, int] = (3600.0, 1 << 30),
    ) -> None:
        self.url, self.name = url, name
        self.registry, self.hub = registry, registry.hub
        self.recorder, self.db, self.fleet = recorder, db, fleet
        self.limits = limits
        self.nc: Client | None = None
        self.js: JetStreamContext | None = None
        self.bus_sessions: set[str] = set()
        self.refused = 0
        self.redelivered = 0
        self.held = 0
        self._tasks: list[asyncio.Task[None]] = []
        self.acks = DurableAcks(self.hub, recorder)

    # ----------------------------------------------------------------- start
    async def start(self) -> None:
        from nats.js import api

        self.nc = await connect(self.url, f"batchscope-dashboard-{self.name}", FIRST_CONNECT_S)
        self.js = self.nc.jetstream(timeout=5.0)
        await ensure_streams(self.js, *self.limits)
        frames = await pull_consumer(
            self.js,
            self.name,
            "frames",
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=FRAMES_ACK_WAIT_S,
            max_ack_pending=20_000,
            deliver_policy=api.DeliverPolicy.ALL,
        )
        summaries = await pull_consumer(
            self.js,
            self.name,
            "summary",
            ack_policy=api.AckPolicy.ALL,
            ack_wait=30.0,
            deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
            max_ack_pending=100_000,
        )
        self._tasks = [
            asyncio.create_task(self._pull(frames, self._on_frames), name="bus-frames"),
            asyncio.create_task(
                self._pull(summaries, self._on_summary, True, FETCH_SUMMARIES),
                name="bus-summary",
            ),
            asyncio.create_task(self.acks.forever(), name="bus-acks"),
            asyncio.create_task(self._leases_forever(), name="bus-leases"),
        ]
        log.info("dashboard %s consuming the fleet from %s", self.name, self.url)

    async def stop(self) -> None:
        """Stop taking frames, write what was taken, ack it, close (both halves below)."""
        await self.stop_intake()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self.recorder.flush()), 10.0)
        await self.close()

    async def stop_intake(self) -> None:
        """The first step of a shutdown: no more messages are fetched or taken in (one
        cut off half-way is not acked: JetStream delivers it again to the next run)."""
        tasks, self._tasks = self._tasks, []
        await cancel_and_wait(tasks)

    async def close(self, timeout: float = 10.0) -> None:
        """The last step, once the recorder has stopped: ack what it wrote (never more:
        the rest is delivered again to the next run), then leave the bus."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.acks.flush(), timeout)
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.nc.close(), timeout)
            self.nc = None

    def status(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "consumer": self.name,
            "connected": bool(self.nc and self.nc.is_connected),
            "unacked": len(self.acks),
            "refused": self.refused,
            "redelivered": self.redelivered,
            "held": self.held,
            **self.fleet.stats(),
        }

    # ------------------------------------------------------------------ pull
    async def _pull(
        self,
        sub: JetStreamContext.PullSubscription,
        handle: Any,
        ack_last: bool = False,
        batch: int = FETCH,
    ) -> None:
        """Fetch and handle in order; `ack_last`: ack each batch's last message at once
        (AckAll: the batch), else the handler puts messages on the recorder's ack queue."""
        while True:
            try:
                msgs = await sub.fetch(batch, timeout=1.0)
            except TimeoutError:
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the bus is away: the client reconnects
                log.debug("fetch: %s", exc)
                await asyncio.sleep(0.5)
                continue
            for msg in msgs:
                try:
                    await handle(msg)
                except Exception:
                    log.exception("bus message on %s not handled", msg.subject)
                    self.refused += 1
                    if not ack_last:
                        self.acks.hold(msg)
            if ack_last and msgs:
                with contextlib.suppress(Exception):
                    await msgs[-1].ack()

    async def _on_summary(self, msg: Msg) -> None:
        try:
            body = json.loads(msg.data)
        except ValueError:
            body = None
        if not isinstance(body, dict) or not self.fleet.fold(body):
            self.refused += 1

    async def _on_frames(self, msg: Msg) -> None:
        if msg.metadata.num_delivered > 1:
            self.redelivered += 1
        try:
            body = json.loads(msg.data)
        except ValueError:
            body = None
        node_name = body.get("node") if isinstance(body, dict) else None
        session = body.get("session") if isinstance(body, dict) else None
        frames = body.get("frames") if isinstance(body, dict) else None
        if (
            not isinstance(node_name, str)
            or not isinstance(session, str)
            or not isinstance(frames, list)
        ):
            self.refused += 1
        else:
            node = await self._node(node_name, session)
            prev = body.get("prev") if isinstance(body, dict) else None
            if node is None:
                self.refused += 1
            elif (
                isinstance(prev, int)
                and prev > node.last_seq
                and msg.metadata.num_delivered <= HOLD_DELIVERIES
            ):
                # An earlier message of this node is still to come: take this one later.
                self.held += 1
                with contextlib.suppress(Exception):
                    await msg.nak(delay=HOLD_DELAY_S)
                return
            else:
                for item in frames:
                    if not isinstance(item, dict):
                        node.invalid += 1
                        continue
                    reply = self.registry.receive(node, item)
                    if reply is not None:
                        log.debug("node %s: %s", node_name, reply.get("detail"))
                self.fleet.count_frames(len(frames))
        self.acks.hold(msg)

    async def _node(self, node_name: str, session: str) -> RemoteNode | None:
        node = self.registry.by_session.get(session)
        if node is not None:
            if session not in self.bus_sessions:
                return None  # a session of a websocket producer: not the bus's to feed
            return node
        if session in self.hub.sessions or session in self.registry.owned:
            return None
        announce = await self._announce(node_name)
        if announce.get("session") != session:
            announce = {"node": node_name}
        restored = await asyncio.to_thread(restore_state, self.db, session)
        announce = {**announce, "type": MessageType.ANNOUNCE, "node": node_name}
        node = self.registry.announce(announce, session, restored)
        self.bus_sessions.add(session)
        if self.nc is not None:
            node.ws = BusChannel(self.nc, subject(node_name, "control"), node)
        return node

    async def _announce(self, node_name: str) -> dict[str, Any]:
        from nats.js.errors import NotFoundError

        if self.js is None:
            return {}
        try:
            raw = await self.js.get_last_msg(NODES_STREAM, subject(node_name, "announce"))
            found = json.loads(raw.data or b"{}")
        except (NotFoundError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}

    # ---------------------------------------------------------------- leases
    async def _leases_forever(self) -> None:
        """Nodes someone is watching keep streaming full detail."""
        while True:
            await asyncio.sleep(LEASE_INTERVAL_S)
            for session in list(self.bus_sessions):
                node = self.registry.by_session.get(session)
                if node is not None and node.ended is None and self.hub.watchers(session):
                    await self.request_detail(node.node, LEASE_S)

    async def request_detail(self, node_name: str, for_s: float) -> dict[str, Any]:
        return await self._control(node_name, {"type": "detail", "for_s": for_s})

    async def request_window(self, node_name: str, seconds: float) -> dict[str, Any]:
        return await self._control(node_name, {"type": "window", "seconds": seconds})

    async def _control(self, node_name: str, req: dict[str, Any]) -> dict[str, Any]:
        """Ask the node (its name as on the fleet page); raises TimeoutError."""
        if self.nc is None:
            raise TimeoutError("not connected to the bus")
        known = [n for n in self.registry.nodes.values() if n.node == node_name]
        req["after_seq"] = known[0].last_seq if known else 0
        return await ask_node(self.nc, node_name, req)
