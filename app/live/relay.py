"""Scale-out: dashboard processes sharing one PostgreSQL fan live frames out to each other
with LISTEN/NOTIFY (no home-made broker).

Each process NOTIFYs the frames it originates (its local engine, its ingest sockets) and
LISTENs for the others'. A relayed frame keeps its origin's seq, so every process shows
the same numbering, and only the origin records it. A payload is the frame's text as the
hub encoded it (never encoded again here); one over NOTIFY's 8000-byte limit is split
into parts sent in one transaction (delivered together, in order).

Processes find each other on the same channel: each says `hello` when it starts
listening and every LIVENESS_S while it listens, and answers a newcomer's at once. A
process sends its frames only while another was heard within PEER_TTL_S: alone on the
database (the common case: one dashboard), it NOTIFYs nothing, and its frames cost
neither encoding here nor the database's notification queue (`unsent` counts them). A
newcomer sees a session from the first frame after its hello was heard, as one started
mid-session does.

When the database drops the connections (a restart, a failover, an administrator), both
sides reconnect with backoff. Meanwhile the outbox is bounded: the oldest frames are
dropped and counted, and every receiver turns a jump in a session's numbering (frames
dropped here, or sent while it was not listening) into a visible `gap` mark, so browsers
resync instead of freezing. `status()` says whether both connections are up.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, cast

from app.live.hub import EventHub
from protocol.codes import FrameType, SessionEvent
from protocol.tasks import cancel_and_wait
from protocol.wire import SessionMeta

log = logging.getLogger("batchscope.relay")

CHANNEL = "batchscope_frames"
PART_BYTES = 7000
FLUSH_INTERVAL_S = 0.02
MAX_OUTBOX = 20_000
"""Payloads kept while the database is away; past it the oldest are dropped (a gap)."""
MAX_PARTIALS = 64
LIVENESS_S = 2.0
"""A process says hello this often while it listens (and its listener checks its
connection as often)."""
PEER_TTL_S = 3 * LIVENESS_S
"""Frames are sent while another process said hello within this (three missed)."""
BACKOFF_S = (0.2, 5.0)
APPLICATION_NAME = "batchscope relay"
"""How the relay's connections show in pg_stat_activity (`... listen`, `... notify`)."""


def pg_conninfo(database_url: str) -> str:
    """A libpq URL from a SQLAlchemy one (postgresql+psycopg:// -> postgresql://)."""
    scheme, rest = database_url.split("://", 1)
    return "postgresql://" + rest if scheme.startswith("postgres") else database_url


class PgRelay:
    def __init__(self, hub: EventHub, database_url: str) -> None:
        self.hub = hub
        self.conninfo = pg_conninfo(database_url)
        self.origin = secrets.token_hex(6)
        self.outbox: deque[str] = deque()
        self.sent = 0
        self.received = 0
        self.dropped = 0
        """Payloads dropped from the outbox while the database was away."""
        self.gaps = 0
        """Jumps in a relayed session's numbering, each published as a `gap` mark."""
        self.reconnects = 0
        self.last_error: str | None = None
        self.connected = {"notify": False, "listen": False}
        self.down_since: float | None = None
        self.unsent = 0
        """Frames not sent: no other process was listening."""
        self.peers: dict[str, float] = {}
        """Other processes' origins -> when their last hello was heard (monotonic)."""
        self._heard_until = 0.0
        """Frames are sent until then (the last hello heard + PEER_TTL_S)."""
        self._own = f'{{"o":"{self.origin}"'
        """How this process's own payloads begin (they come back to its listener)."""
        self._hello = self._own + ',"hello":1}'
        self._hello_due = False
        """Say hello at the next flush (listening anew, or a newcomer heard)."""
        self._next_hello = 0.0
        self._parts: dict[str, list[str]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._ready = asyncio.Event()
        hub.add_listener(self.on_frame)

    # -------------------------------------------------------------- outgoing
    def on_frame(
        self, session: str, frame_type: str, seq: int, data: Mapping[str, Any], text: str
    ) -> None:
        del frame_type, seq, data  # all in `text`, the frame's envelope
        if self.hub.is_relayed(session):
            return
        if time.monotonic() > self._heard_until:
            self.unsent += 1  # nobody else listens
            return
        payload = f'{self._own},"f":{text}}}'
        if len(payload) <= PART_BYTES and len(payload.encode()) <= PART_BYTES:
            self._queue(payload)
            return
        # Parts carry base64 (ASCII, nothing for JSON to escape), so each stays under the
        # limit in bytes.
        pid = secrets.token_hex(4)
        packed = base64.b64encode(payload.encode()).decode("ascii")
        chunks = [packed[i : i + PART_BYTES] for i in range(0, len(packed), PART_BYTES)]
        for n, chunk in enumerate(chunks):
            self._queue(f'{self._own},"p":"{pid}","n":{n},"of":{len(chunks)},"c":"{chunk}"}}')

    def _queue(self, payload: str) -> None:
        if len(self.outbox) >= MAX_OUTBOX:
            self.outbox.popleft()
            self.dropped += 1
        self.outbox.append(payload)

    async def _sender(self) -> None:
        await self._reconnecting("notify", self._send_on)

    async def _send_on(self, conn: Any) -> None:
        import psycopg

        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            if self.connected["listen"] and (
                self._hello_due or time.monotonic() >= self._next_hello
            ):
                # (On this connection: the listener's is busy iterating notifications.)
                self._hello_due = False
                self._next_hello = time.monotonic() + LIVENESS_S
                await self._notify(conn, [self._hello])
            if not self.outbox:
                continue
            batch = list(self.outbox)
            self.outbox.clear()
            try:
                await self._notify(conn, batch)
            except (psycopg.OperationalError, psycopg.InterfaceError, asyncio.CancelledError):
                # Not delivered (the transaction did not commit): send it again later,
                # ahead of newer frames, within the outbox bound.
                room = MAX_OUTBOX - len(self.outbox)
                self.dropped += max(0, len(batch) - room)
                self.outbox.extendleft(reversed(batch[len(batch) - max(room, 0) :]))
                raise
            except psycopg.Error as exc:
                # The database refused a payload, not the connection: send them one by
                # one and drop only what it refuses (receivers see a marked gap).
                log.warning("relay: a payload was refused (%s); isolating it", exc)
                for payload in batch:
                    try:
                        await self._notify(conn, [payload])
                    except (psycopg.OperationalError, psycopg.InterfaceError):
                        raise
                    except psycopg.Error as one:
                        self.dropped += 1
                        self.last_error = f"notify refused a payload: {one}"[:300]
            self.sent += len(batch)

    @staticmethod
    async def _notify(conn: Any, batch: list[str]) -> None:
        async with conn.transaction(), conn.cursor() as cur:
            # One round trip for the batch (psycopg pipelines executemany).
            await cur.executemany("SELECT pg_notify(%s, %s)", [(CHANNEL, p) for p in batch])

    # -------------------------------------------------------------- incoming
    async def _listener(self) -> None:
        await self._reconnecting("listen", self._listen_on)

    async def _listen_on(self, conn: Any) -> None:
        await conn.execute(f"LISTEN {CHANNEL}")
        self._hello_due = True  # the others learn that this process listens (again)
        self._ready.set()
        while True:
            async for notify in conn.notifies(timeout=LIVENESS_S):
                if notify.payload.startswith(self._own):
                    continue  # this process's own, back from the channel
                newcomer = False
                try:
                    msg = json.loads(notify.payload)
                    if "hello" in msg:
                        newcomer = self._heard(msg["o"])
                    else:
                        self._receive(msg)
                except Exception as exc:  # one bad payload must not stop the relay
                    log.warning("relay: dropped a malformed payload: %s", exc)
                if newcomer:
                    self._hello_due = True  # answered at once: it hears of this one now
            self._forget_silent()
            await conn.execute("SELECT 1")  # a dead connection raises here

    def _heard(self, origin: str) -> bool:
        """Another process said hello; True if it is new here."""
        now = time.monotonic()
        new = origin not in self.peers
        self.peers[origin] = now
        self._heard_until = max(self._heard_until, now + PEER_TTL_S)
        return new

    def _forget_silent(self) -> None:
        """Drop the processes not heard within PEER_TTL_S (stopped, or cut off)."""
        now = time.monotonic()
        for origin, at in list(self.peers.items()):
            if now - at > PEER_TTL_S:
                del self.peers[origin]

    async def _reconnecting(self, role: str, use: Any) -> None:
        """Run `use(connection)` forever, reconnecting with backoff when it fails."""
        import psycopg

        backoff = BACKOFF_S[0]
        while True:
            try:
                autocommit = role == "listen"
                async with await psycopg.AsyncConnection.connect(
                    self.conninfo,
                    autocommit=autocommit,
                    connect_timeout=5,
                    application_name=f"{APPLICATION_NAME} {role}",
                ) as conn:
                    self.connected[role] = True
                    if all(self.connected.values()):
                        self.down_since = None
                    backoff = BACKOFF_S[0]
                    await use(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.last_error = f"{role}: {type(exc).__name__}: {exc}"[:300]
                if self.connected[role]:
                    log.warning("relay %s connection lost (%s); reconnecting", role, exc)
                    self.reconnects += 1
                self.connected[role] = False
                if self.down_since is None:
                    self.down_since = time.monotonic()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_S[1])

    def _receive(self, msg: Mapping[str, Any]) -> None:
        if "p" in msg:
            parts = self._parts.setdefault(msg["p"], [])
            parts.append(msg["c"])
            if len(parts) < msg["of"]:
                while len(self._parts) > MAX_PARTIALS:  # parts of payloads never completed
                    self._parts.pop(next(iter(self._parts)))
                return
            msg = json.loads(base64.b64decode("".join(self._parts.pop(msg["p"]))))
        frame = msg["f"]  # the origin's envelope
        session, frame_type = frame["session"], frame["type"]
        seq, data = frame["seq"], frame["data"]
        if session not in self.hub.sessions:
            meta = data if frame_type == FrameType.SESSION else {"name": session}
            relayed = cast(SessionMeta, {**meta, "relayed": True})
            self.hub.open_session(
                session, relayed, live=self.hub.follow_most_active, announce=False
            )
            self.hub.mark_relayed(session)
        info = self.hub.sessions[session]
        if seq <= info.fold.seq:
            return
        if info.fold.seq > 0 and seq > info.fold.seq + 1:
            # Frames lost on the way (dropped by the sender, or sent while this side was
            # reconnecting): a visible mark at the first missing seq, never a silent hole.
            self.gaps += 1
            gap = {
                "event": SessionEvent.GAP,
                "from_seq": info.fold.seq + 1,
                "to_seq": seq - 1,
                "reason": "relay: frames lost while the database connection was down",
            }
            self.hub.publish(session, FrameType.SESSION, gap, seq=info.fold.seq + 1)
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
        tasks, self._tasks = self._tasks, []
        await cancel_and_wait(tasks)

    def healthy(self) -> bool:
        return all(self.connected.values())

    def status(self) -> dict[str, Any]:
        down = self.down_since
        now = time.monotonic()
        return {
            "ok": self.healthy(),
            "state": "connected" if self.healthy() else "reconnecting",
            "origin": self.origin,
            "sent": self.sent,
            "received": self.received,
            "pending": len(self.outbox),
            "dropped": self.dropped,
            "unsent": self.unsent,
            "peers": sum(1 for at in self.peers.values() if now - at <= PEER_TTL_S),
            "gaps": self.gaps,
            "reconnects": self.reconnects,
            "down_s": None if down is None else round(now - down, 3),
            "last_error": self.last_error,
        }
