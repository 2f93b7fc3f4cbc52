"""Remote producers (our `batchscope engine --push`, or vLLM through the adapter) stream
protocol frames into the hub over /ws/ingest. One RemoteNode per connected producer
(app.nodes.remote_node).

Producer seq numbers detect loss and duplicates; the hub assigns its own seq per session,
so a producer's gap becomes a visible `session` frame ({"event": SessionEvent.GAP}) in the stream.
Control commands travel back over the same socket and are answered by id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from app.db.lifecycle import mark_ended
from app.db.quarantine import Rejected
from app.frames.fold import SessionState
from app.frames.validate import INT32_MAX, validate_frame
from app.live.hub import EventHub
from app.nodes.remote_node import NodeUnavailable, NodeView, RemoteNode
from app.nodes.replies import Channel
from protocol.codes import RECORDED_FRAME_TYPES, FrameType, MessageType, SessionEvent
from protocol.envelope import encode
from protocol.session import node_source, session_meta
from protocol.wire import SessionMeta

log = logging.getLogger("batchscope.nodes")


class NodeRegistry:
    def __init__(self, hub: EventHub) -> None:
        self.hub = hub
        self.nodes: dict[str, RemoteNode] = {}
        self.by_session: dict[str, RemoteNode] = {}
        self.owned: dict[str, str] = {}
        """Key hashes of the sessions producers created (app.nodes.ownership)."""
        self._sends: set[asyncio.Task[None]] = set()

    def on_rejected(self, item: Rejected) -> None:
        """The recorder set a frame aside: count it on the node and tell its producer."""
        node = self.by_session.get(item.session)
        if node is None:
            return
        node.unstored += 1
        node.last_error = f"frame {item.seq} not recorded: {item.reason}"
        ws = node.ws
        if ws is not None and node.connected:
            text = encode({"type": MessageType.ERROR, "seq": item.seq, "detail": node.last_error})
            task = asyncio.get_running_loop().create_task(_send_quietly(ws, text))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)

    def views(self) -> list[NodeView]:
        return [n.view() for n in self.nodes.values()]

    def announce(
        self, msg: dict[str, Any], session: str, restored: SessionState | None = None
    ) -> RemoteNode:
        """Register a producer on `session` (app.nodes.ownership.claim gave it). `restored`:
        its session as recorded, when this dashboard restarted since (the session
        continues with the producer's numbering)."""
        node_name = node_name_of(msg)
        info = self.hub.sessions.get(session)
        model = str(msg.get("model") or "")[:300]
        engine = str(msg.get("engine") or "batchscope")[:32]
        config = msg.get("config")
        meta = session_meta(
            str(msg.get("name") or node_name)[:200],
            node_source(node_name),
            engine=engine,
            runner=str(msg.get("runner") or msg.get("engine") or "")[:32],
            simulated=bool(msg.get("simulated", False)),
            model=model,
            device=str(msg.get("device") or "")[:32],
            config=config if isinstance(config, dict) else {},
            node=node_name,
            served_model_name=str(msg.get("served_model_name") or model)[:300],
        )
        if info is None and restored is not None:
            self.hub.adopt_session(restored, meta, live=self.hub.follow_most_active)
            last = restored.seq
        elif info is None:
            self.hub.open_session(session, meta, live=self.hub.follow_most_active, announce=False)
            last = self.hub.sessions[session].fold.seq
        else:
            info.live = True
            last = info.fold.seq
        node = self.by_session.get(session)
        if node is None:
            node = RemoteNode(node_name, session, engine, model)
        node.connected, node.since, node.last_seq = True, time.time(), last
        degraded = _degraded(msg.get("degraded"))
        if degraded is not None:
            node.degraded = degraded
        node.ended = None
        self.nodes[node_name] = node
        self.by_session[session] = node
        return node

    def announce_local(self, session: str, meta: SessionMeta, node_name: str) -> RemoteNode:
        """Register the dashboard's own engine process on its new `session` (always the
        live one; its first frame is its own `opened` mark)."""
        self.hub.open_session(session, meta, live=True, announce=False)
        node = RemoteNode(node_name, session, str(meta.get("engine")), str(meta.get("model")))
        self.nodes[node_name] = node
        self.by_session[session] = node
        return node

    def receive(
        self,
        node: RemoteNode,
        msg: dict[str, Any],
        *,
        trusted: bool = False,
        data_json: str | None = None,
    ) -> Mapping[str, Any] | None:
        """Handle one producer message (a node's socket, the fleet bus, or the dashboard's
        own engine process on its link: every frame comes in here); returns an error reply
        or None. `trusted`: the engine link, whose frames our own converter made from typed
        events: their data is not validated again, and `data_json` (the data as that
        process encoded it) is forwarded as is."""
        kind = msg.get("type")
        handle = MESSAGES.get(kind) if isinstance(kind, str) else None
        if handle is not None:
            return handle(node, msg)
        if kind not in RECORDED_FRAME_TYPES:
            node.invalid += 1
            return {"type": MessageType.ERROR, "detail": f"unknown message type {kind!r}"}
        seq = msg.get("seq")
        if not _is_count(seq) or seq < 1:
            node.invalid += 1
            return {"type": MessageType.ERROR, "detail": f"seq: must be an integer 1-{INT32_MAX}"}
        if msg.get("session") not in (None, node.session):
            node.invalid += 1
            return {
                "type": MessageType.ERROR,
                "seq": seq,
                "detail": "session: not this connection's",
            }
        if seq <= node.last_seq:
            return None  # a resend after reconnecting: already have it
        if trusted:
            clean: dict[str, Any] = msg["data"]
        else:
            try:
                clean = validate_frame(kind, msg.get("data"))
            except (ValidationError, ValueError) as exc:
                node.invalid += 1
                detail = f"{kind} frame: {_first_error(exc)}"
                return {"type": MessageType.ERROR, "seq": seq, "detail": detail}
        return self._accept(node, kind, seq, clean, data_json)

    def _accept(
        self,
        node: RemoteNode,
        kind: str,
        seq: int,
        clean: dict[str, Any],
        data_json: str | None = None,
    ) -> dict[str, Any] | None:
        """A frame that passed validation (or came over the trusted link, which encoded
        `data_json` once): step checks, gap marks, publish."""
        last_step = self.hub.sessions[node.session].fold.step
        if kind == FrameType.ITERATION and clean["step"] <= last_step:
            # Whatever is accepted must be storable: a step is recorded once.
            node.invalid += 1
            detail = f"iteration frame: step {clean['step']} is not after step {last_step}"
            return {"type": MessageType.ERROR, "seq": seq, "detail": detail}
        if seq > node.last_seq + 1:
            # Frames the producer dropped: mark the hole with a frame of its own, using
            # the first missing seq (the producer will never send that number again).
            node.gaps += 1
            node.missing += seq - node.last_seq - 1
            gap = {"event": SessionEvent.GAP, "from_seq": node.last_seq + 1, "to_seq": seq - 1}
            self.hub.publish(node.session, FrameType.SESSION, gap, seq=node.last_seq + 1)
        node.last_seq = seq
        node.frames += 1
        node.tick()
        self.hub.publish(node.session, kind, clean, seq=seq, data_json=data_json)
        if kind == FrameType.SESSION and clean.get("event") == SessionEvent.CLOSED:
            # The producer ended its session (a clean shutdown): recorded as closed.
            self._ended(node, str(clean.get("reason") or "closed")[:32])
        return None

    def _ended(self, node: RemoteNode, reason: str) -> None:
        node.ended = reason
        info = self.hub.sessions.get(node.session)
        if info is not None:
            info.live = False

    def sweep_vanished(self, after_s: float, now: float | None = None) -> list[str]:
        """The sessions of nodes disconnected for over `after_s` seconds, now ended as
        `vanished` (no frame is added: the producer owns the numbering, and one that
        comes back resumes its session)."""
        now = time.time() if now is None else now
        gone = [
            n
            for n in self.nodes.values()
            if not n.connected and n.ended is None and now - n.since > after_s
        ]
        for node in gone:
            log.warning(
                "node %r vanished: no word for %.0f s; its session %s is marked ended",
                node.node,
                now - node.since,
                node.session,
            )
            self._ended(node, "vanished")
        return [n.session for n in gone]

    def disconnected(self, node: RemoteNode) -> None:
        node.connected, node.since, node.ws = False, time.time(), None
        node.replies.fail_all(NodeUnavailable(f"node {node.node!r} disconnected"))
        # No frame is added to the session: the producer owns its numbering. The nodes
        # view shows the disconnection; a reconnect resumes after node.last_seq.


async def watch_vanished(registry: NodeRegistry, db: sessionmaker[Session], after_s: float) -> None:
    """Sweep for vanished nodes a few times per `after_s` (at least once a minute) and
    record their sessions as ended (`vanished`; frames that come later reopen them)."""
    while True:
        await asyncio.sleep(min(max(after_s / 4, 0.05), 60.0))
        gone = registry.sweep_vanished(after_s)
        if gone:
            try:
                await asyncio.to_thread(mark_ended, db, gone, "vanished")
            except Exception:
                log.exception("could not mark vanished sessions ended")


def node_name_of(msg: dict[str, Any]) -> str:
    return str(msg.get("node") or "node")[:100]


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT32_MAX


DEGRADED_MAX = 64
"""Degraded observations a node may name (more are not kept)."""


def _degraded(value: object) -> dict[str, int] | None:
    """A producer's `degraded` (observation name -> times skipped), or None when absent or
    not that shape."""
    if not isinstance(value, dict):
        return None
    items = [(k, v) for k, v in value.items() if isinstance(k, str) and _is_count(v)]
    if len(items) != len(value):
        return None
    return {k[:64]: v for k, v in items[:DEGRADED_MAX]}


async def _send_quietly(ws: Channel, text: str) -> None:
    with contextlib.suppress(Exception):
        await ws.send_text(text)


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        return f"{where}: {err['msg']}"
    return str(exc)


def _on_reply(node: RemoteNode, msg: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A producer's answer to one of our commands."""
    if not _is_count(msg.get("id")):
        node.invalid += 1
        return {"type": MessageType.ERROR, "detail": "reply: id must be a non-negative integer"}
    node.replies.settle(msg)
    return None


def _on_stats(node: RemoteNode, msg: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A producer's own counts: what it buffers and dropped, its observer's errors."""
    buffered, dropped = msg.get("buffered", 0), msg.get("dropped", 0)
    if not (_is_count(buffered) and _is_count(dropped)):
        node.invalid += 1
        return {
            "type": MessageType.ERROR,
            "detail": f"stats: buffered and dropped must be integers 0-{INT32_MAX}",
        }
    node.producer_buffered, node.producer_dropped = buffered, dropped
    errors = msg.get("observer_errors", 0)
    if _is_count(errors):
        node.observer_errors = errors
    degraded = _degraded(msg.get("degraded"))
    if degraded is not None:
        node.degraded = degraded
    return None


MESSAGES: dict[str, Callable[[RemoteNode, Mapping[str, Any]], Mapping[str, Any] | None]] = {
    MessageType.REPLY.value: _on_reply,
    MessageType.STATS.value: _on_stats,
}
"""A producer's messages other than its frames, by type (frames: RECORDED_FRAME_TYPES)."""
