"""/ws/ingest: remote producers announce a session and stream protocol frames."""

from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, Depends, Request, WebSocket, WebSocketDisconnect

from app.db import queries
from app.nodes.ingest import NodeRegistry
from app.protocol.envelope import encode
from app.protocol.session import new_session_id
from app.protocol.state import SessionState
from app.security import has_control, require_view

router = APIRouter()
ANNOUNCE_TIMEOUT_S = 10.0
MAX_MESSAGE_BYTES = 4 << 20


def _restore(ws: WebSocket, session: object) -> SessionState | None:
    """The recorded state of a session this dashboard no longer holds in memory."""
    hub = ws.app.state.hub
    if not isinstance(session, str) or session in hub.sessions:
        return None
    with ws.app.state.db() as db:
        try:
            meta = queries.get_session(db, session)
        except queries.NotFound:
            return None
        return queries.state_at_seq(db, session, meta["last_seq"])


@router.websocket("/ws/ingest")
async def ws_ingest(ws: WebSocket) -> None:
    if not has_control(ws):  # type: ignore[arg-type]
        await ws.close(code=1008, reason="ingest needs the token (Authorization: Bearer)")
        return
    await ws.accept()
    registry: NodeRegistry = ws.app.state.nodes
    try:
        first = json.loads(await asyncio.wait_for(ws.receive_text(), ANNOUNCE_TIMEOUT_S))
    except (TimeoutError, ValueError, WebSocketDisconnect):
        await ws.close(code=1002, reason="expected an announce message first")
        return
    if not isinstance(first, dict) or first.get("type") != "announce":
        await ws.close(code=1002, reason="expected an announce message first")
        return
    restored = await asyncio.to_thread(_restore, ws, first.get("session"))
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


@router.get("/api/nodes", dependencies=[Depends(require_view)])
async def nodes(request: Request) -> list[dict[str, object]]:
    registry: NodeRegistry = request.app.state.nodes
    return registry.views()
