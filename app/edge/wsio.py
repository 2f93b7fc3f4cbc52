"""Websocket input at the edge: JSON text within bounds, every refusal answered (an error
frame, or a close with a code that says why), and an unexpected failure closed with 1011
instead of a dropped connection."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import WebSocket, WebSocketDisconnect
from starlette.websockets import WebSocketState

from app.edge.bounded_json import JsonRefused, loads

log = logging.getLogger("batchscope.ws")

MAX_MESSAGE_BYTES = 4 << 20
UNSUPPORTED_DATA = 1003
INVALID_PAYLOAD = 1007
POLICY = 1008
INTERNAL_ERROR = 1011


class BadMessage(ValueError):
    """A message that cannot be read: answer it (error frame) or close with `code`."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code


async def receive_json(ws: WebSocket, max_bytes: int = MAX_MESSAGE_BYTES) -> Any:
    """The next message as JSON. Raises WebSocketDisconnect when the client left, and
    BadMessage for a binary frame or JSON that is malformed, too large or too deep."""
    message = await ws.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000), message.get("reason"))
    text = message.get("text")
    if text is None:
        raise BadMessage(UNSUPPORTED_DATA, "binary frames are not accepted: send JSON text")
    try:
        return loads(text, max_bytes)
    except JsonRefused as exc:
        raise BadMessage(INVALID_PAYLOAD, str(exc)) from None


async def close(ws: WebSocket, code: int, reason: str) -> None:
    """Close with a code, whatever state the socket is in (a no-op once it is gone)."""
    if ws.application_state == WebSocketState.DISCONNECTED:
        return
    with contextlib.suppress(Exception):
        await ws.close(code=code, reason=reason[:120])


@contextlib.asynccontextmanager
async def closing_on_error(ws: WebSocket, what: str) -> AsyncIterator[None]:
    """Around a socket's handler: a client leaving is normal; anything else unexpected is
    logged and the socket closed with 1011, never just dropped."""
    try:
        yield
    except WebSocketDisconnect:
        pass
    except Exception:
        log.exception("%s: unexpected error; closing the socket with 1011", what)
        await close(ws, INTERNAL_ERROR, "internal error")
