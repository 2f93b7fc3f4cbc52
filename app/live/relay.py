"""Scale-out: dashboard processes sharing one PostgreSQL fan live frames out to each other
with LISTEN/NOTIFY (no home-made broker).

Each process NOTIFYs the frames it originates (its local engine, its ingest sockets) and
LISTENs for the others'. A relayed frame keeps its origin's seq, so every process shows
the same numbering, and only the origin records it. Payloads over NOTIFY's 8000-byte
limit are split into parts sent in one transaction (delivered together, in order).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from typing import Any

from app.live.hub import EventHub

log = logging.getLogger("batchscope.relay")

CHANNEL = "batchscope_frames"
PART_BYTES = 7000
FLUSH_INTERVAL_S = 0.02


def pg_conninfo(database_url: str) -> str:
    """A libpq URL from a SQLAlchemy one (postgresql+psycopg:// -> postgresql://)."""
    scheme, rest = database_url.split("://", 1)
    return "postgresql://" + rest if scheme.startswith("postgres") else database_url


class PgRelay:
    def __init__(self, hub: EventHub, database_url: str) -> None:
        self.hub = hub
        self.conninfo = pg_conninfo(database_url)
        self.origin = secrets.token_hex(6)
        self.outbox: list[str] = []
        self.sent = 0
        self.received = 0
        self._parts: dict[str, list[str]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._ready = asyncio.Event()
        hub.add_listener(self.on_frame)

    # -------------------------------------------------------------- outgoing
    def on_frame(
        self, session: str, frame_type: str, seq: int, data: dict[str, Any], text: str
    ) -> None:
        del text
        if self.hub.is_relayed(session):
            return
        payload = json.dumps(
            {"o": self.origin, "s": session, "t": frame_type, "q": seq, "d": data},
            separators=(",", ":"),
        )
        if len(payload) <= PART_BYTES:
            self.outbox.append(payload)
            return
        pid = secrets.token_hex(4)
        chunks = [payload[i : i + PART_BYTES] for i in range(0, len(payload), PART_BYTES)]
        for n, chunk in enumerate(chunks):
            self.outbox.append(
                json.dumps({"o": self.origin, "p": pid, "n": n, "of": len(chunks), "c": chunk})
            )

    async def _sender(self) -> None:
        import psycopg

        async with await psycopg.AsyncConnection.connect(self.conninfo, autocommit=False) as conn:
            while True:
                await asyncio.sleep(FLUSH_INTERVAL_S)
                if not self.outbox:
                    continue
                batch, self.outbox = self.outbox, []
                async with conn.transaction():
                    for payload in batch:
                        await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
                self.sent += len(batch)

    # -------------------------------------------------------------- incoming
    async def _listener(self) -> None:
        import psycopg

        async with await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True) as conn:
            await conn.execute(f"LISTEN {CHANNEL}")
            self._ready.set()
            async for notify in conn.notifies():
                try:
                    self._receive(json.loads(notify.payload))
                except Exception as exc:  # one bad payload must not stop the relay
                    log.warning("relay: dropped a malformed payload: %s", exc)

    def _receive(self, msg: dict[str, Any]) -> None:
        if msg.get("o") == self.origin:
            return
        if "p" in msg:
            parts = self._parts.setdefault(msg["p"], [])
            parts.append(msg["c"])
            if len(parts) < msg["of"]:
                return
            msg = json.loads("".join(self._parts.pop(msg["p"])))
        session, frame_type, seq, data = msg["s"], msg["t"], msg["q"], msg["d"]
        if session not in self.hub.sessions:
            meta = data if frame_type == "session" else {"name": session}
            self.hub.open_session(
                session, {**meta, "relayed": True}, live=self.hub.follow_most_active, announce=False
            )
            self.hub.mark_relayed(session)
        info = self.hub.sessions[session]
        if seq > info.state.seq:
            self.hub.publish(session, frame_type, data, seq=seq)
            self.received += 1

    # ------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._listener(), name="relay-listen"),
            asyncio.create_task(self._sender(), name="relay-notify"),
        ]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), 10)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task

    def status(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "sent": self.sent,
            "received": self.received,
            "pending": len(self.outbox),
        }
