"""/ws/ingest: remote producers announce a session and stream protocol frames.

Producers are programs, not pages: a browser Origin is refused, and the token is read from
the Authorization header only (never the viewer's cookie). A session belongs to the
producer that created it (app.nodes.ownership)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, WebSocket

from app.deps import DbDep, NodesDep
from app.edge.wsio import POLICY, BadMessage, close, closing_on_error, receive_json
from app.nodes.ingest import NodeRegistry, node_name_of
from app.nodes.ownership import Refused, claim
from app.nodes.remote_node import RemoteNode
from app.security import bearer_matches
from protocol import control
from protocol.codes import MessageType
from protocol.envelope import encode
from protocol.session import new_session_id

router = APIRouter()
ANNOUNCE_TIMEOUT_S = 10.0
PROTOCOL_ERROR = 1002


@router.websocket("/ws/ingest")
async def ws_ingest(ws: WebSocket, registry: NodesDep, db: DbDep) -> None:
    if ws.headers.get("origin") is not None:
        await ws.close(code=POLICY, reason="ingest is for producers, not browser pages")
        return
    if not bearer_matches(ws):
        await ws.close(code=POLICY, reason="ingest needs the token (Authorization: Bearer)")
        return
    await ws.accept()
    async with closing_on_error(ws, "ingest"):
        try:
            first = await asyncio.wait_for(receive_json(ws), ANNOUNCE_TIMEOUT_S)
        except (TimeoutError, BadMessage):
            first = None
        if not isinstance(first, dict) or first.get("type") != MessageType.ANNOUNCE:
            await close(ws, PROTOCOL_ERROR, "expected an announce message first")
            return
        try:
            got = await claim(
                db,
                registry.hub,
                registry.owned,
                first.get("session"),
                first.get("resume_key"),
                node_name_of(first),
                new_session_id(),
            )
        except Refused as exc:
            await ws.send_text(encode(control.error(str(exc))))
            await close(ws, POLICY, str(exc))
            return
        node = registry.announce(first, got.session, got.restored)
        node.ws = ws
        await ws.send_text(encode(control.welcome(node.session, node.last_seq, got.key)))
        try:
            await _receive(ws, registry, node)
        finally:
            if node.ws is ws:
                registry.disconnected(node)


async def _receive(ws: WebSocket, registry: NodeRegistry, node: RemoteNode) -> None:
    while True:
        try:
            msg = await receive_json(ws)
        except BadMessage as exc:
            node.invalid += 1
            await ws.send_text(encode(control.error(str(exc))))
            continue
        for item in msg if isinstance(msg, list) else [msg]:
            if isinstance(item, dict):
                reply = registry.receive(node, item)
            else:
                node.invalid += 1
                reply = control.error("a message must be an object")
            if reply is not None:
                await ws.send_text(encode(reply))
