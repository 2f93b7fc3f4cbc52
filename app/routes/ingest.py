"""/ws/ingest: remote producers announce a session and stream protocol frames."""

from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from app.db import queries
from app.deps import DbDep, NodesDep
from app.errors import NotFound
from app.live.hub import EventHub
from app.protocol.envelope import encode
from app.protocol.session import new_session_id
from app.protocol.state import SessionState
from app.security import has_control

router = APIRouter()
ANNOUNCE_TIMEOUT_S = 10.0
MAX_MESSAGE_BYTES = 4 << 20


def _restore(db: DbDep, hub: EventHub, session: object) -> SessionState | None:
    """The recorded state of a session this dashboard no longer holds in memory."""
    if not isinstance(session, str) or session in hub.sessions:
        return None
    with db() as s:
        try:
            meta = queries.get_session(s, session)
        except NotFound:
            return None
        return queries.state_at_seq(s, session, meta["last_seq"])


@router.websocket("/ws/ingest")
async def ws_ingest(ws: WebSocket, registry: NodesDep, db: DbDep) -> None:
    if not has_control(ws):  # type: ignore[arg-type]
        await ws.close(code=1008, reason="ingest needs the token (Authorization: Bearer)")
        return
    await ws.accept()
    try:
        first = json.loads(await asyncio.wait_for(ws.receive_text(), ANNOUNCE_TIMEOUT_S))
    except (TimeoutError, ValueError, WebSocketDisconnect):
        await ws.close(code=1002, reason="expected an announce message first")
        return
    if not isinstance(first, dict) or first.get("type") != "announce":
        await ws.close(code=1002, reason="expected an announce message first")
        return
    restored = await asyncio.to_thread(_restore, db, registry.hub, first.get("session"))
    node = registry.announce(first, new_session_id(), restored)
    node.ws = ws
    await ws.send_text(
        encode({"type": "welcome", "session": node.session, "last_seq": node.last_seq})
    )
    try:
        while True:
            text = await ws.receive_text()
            if len(text) > MAX_MESSAGE_BYTES:
                node.invalid += 1
                await ws.send_text(encode({"type": "error", "detail": "message too large"}))
                continue
            try:
                msg = json.loads(text)
            except ValueError:
                node.invalid += 1
                await ws.send_text(encode({"type": "error", "detail": "not valid JSON"}))
                continue
            messages = msg if isinstance(msg, list) else [msg]
            for item in messages:
                reply = (
                    registry.receive(node, item)
                    if isinstance(item, dict)
                    else {"type": "error", "detail": "a message must be an object"}
                )
                if reply is not None:
                    await ws.send_text(encode(reply))
    except WebSocketDisconnect:
        pass
    finally:
        if node.ws is ws:
            registry.disconnected(node)
