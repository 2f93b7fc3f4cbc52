"""Commands to a bus node: the Channel a RemoteNode sends through, as NATS requests on the
node's `.control` subject; the reply settles the command's future like a websocket's."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from app.nodes.ingest import RemoteNode
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
