"""EdgeMiddleware (pure ASGI, before routing): refuses a Host the server was not started
for, paths and queries holding NUL bytes, bodies over the size limit and JSON bodies
nested beyond the depth limit, each with a clear 4xx. What passes reaches the app
unchanged (the body is replayed)."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.edge.bounded_json import MAX_DEPTH, JsonRefused, loads
from app.edge.hosts import AllowedHosts

MAX_BODY_BYTES = 1 << 20


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


async def _refuse(scope: Scope, send: Send, status: int, detail: str) -> None:
    if scope["type"] == "websocket":
        # Before the handshake: the server answers the upgrade with 403.
        await send({"type": "websocket.close", "code": 1008, "reason": detail[:120]})
        return
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class EdgeMiddleware:
    def __init__(self, app: ASGIApp, hosts: AllowedHosts, max_body: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.hosts = hosts
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = _header(scope, b"host")
        if not self.hosts.allows(host):
            await _refuse(scope, send, 400, f"host {host!r} is not served here (--allowed-host)")
            return
        query = scope.get("query_string", b"")
        if "\x00" in scope.get("path", "") or b"%00" in query or b"\x00" in query:
            await _refuse(scope, send, 400, "NUL bytes are not allowed in paths or queries")
            return
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH", "DELETE"):
            await self._bounded_body(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _bounded_body(self, scope: Scope, receive: Receive, send: Send) -> None:
        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            await _refuse(scope, send, 413, f"body over {self.max_body} bytes")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await _refuse(scope, send, 413, f"body over {self.max_body} bytes")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        ctype = (_header(scope, b"content-type") or "").lower()
        if body and "json" in ctype:
            try:
                loads(body, self.max_body)
            except JsonRefused as exc:
                if "nested" in str(exc):
                    await _refuse(scope, send, 400, f"body: {exc} (limit {MAX_DEPTH})")
                    return
                # Malformed JSON: the route answers that in its own words.
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            message: Any = await receive()
            return dict(message)

        await self.app(scope, replay, send)
