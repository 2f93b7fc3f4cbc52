"""Commands to a bus node, as NATS requests on the node's `.control` subject: the Channel a
RemoteNode sends through (the reply settles the command's future like a websocket's), and
the dashboard's own asks (full detail, a window of frames)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from app.nodes.remote_node import RemoteNode
from protocol.bus import subject
from protocol.codes import MessageType

if TYPE_CHECKING:
    from nats.aio.client import Client

REQUEST_TIMEOUT_S = 15.0


class BusChannel:
    def __init__(self, nc: Client, control_subject: str, node: RemoteNode) -> None:
        self.nc = nc
        self.subject = control_subject
        self.node = node

    async def send_text(self, data: str) -> None:
        try:
            reply = await self.nc.request(self.subject, data.encode(), timeout=REQUEST_TIMEOUT_S)
        except Exception as exc:  # no responder, timeout, the bus away
            raise TimeoutError(f"node {self.node.node!r}: {exc}") from None
        msg = json.loads(reply.data)
        if isinstance(msg, dict) and msg.get("type") == MessageType.REPLY:
            self.node.replies.settle(msg)


async def ask_node(nc: Client, node_name: str, req: dict[str, Any]) -> dict[str, Any]:
    """Ask the node `req` (its name as on the fleet page); raises TimeoutError."""
    try:
        reply = await nc.request(
            subject(node_name, "control"), json.dumps(req).encode(), timeout=5.0
        )
    except Exception as exc:
        raise TimeoutError(f"node {node_name!r} did not answer: {exc}") from None
    out = json.loads(reply.data)
    return out if isinstance(out, dict) else {}
