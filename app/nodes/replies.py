"""Control commands on their way to a producer (a node's ingest socket, or our own engine
process's link), each waiting for the reply with its id."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from typing import Any, Protocol

from protocol.codes import MessageType
from protocol.control import command
from protocol.envelope import encode


class Channel(Protocol):
    """Where a producer's replies and commands go: its websocket, or our engine's link."""

    async def send_text(self, data: str) -> None: ...


class Replies:
    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[Any]] = {}

    async def call(
        self, channel: Channel, kind: str, args: Mapping[str, Any], timeout: float
    ) -> Any:
        """Send `{"type": "command", "id", "kind", "args"}` and await its reply's result
        (ValueError with the producer's detail when it refused; TimeoutError)."""
        cid = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[cid] = future
        try:
            await channel.send_text(encode(command(cid, kind, dict(args))))
            return await asyncio.wait_for(future, timeout)
        finally:
            self.pending.pop(cid, None)

    def settle(self, reply: Mapping[str, Any]) -> None:
        """A `{"type": "reply", "id", "ok", "result" | "detail"}` from the producer
        (protocol.control.Reply, as parsed: not trusted)."""
        if reply.get("type", MessageType.REPLY) != MessageType.REPLY:
            return
        cid = reply.get("id")
        future = self.pending.get(cid) if isinstance(cid, int) else None
        if future is None or future.done():
            return
        if reply.get("ok") is True:
            future.set_result(reply.get("result"))
        else:
            future.set_exception(ValueError(str(reply.get("detail") or "refused")[:2000]))

    def fail_all(self, exc: Exception) -> None:
        """The producer is gone: every command still waiting fails with `exc`."""
        for future in self.pending.values():
            if not future.done():
                future.set_exception(exc)
        self.pending.clear()
