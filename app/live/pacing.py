"""How far behind a viewer is, by time: the server pings in the stream and a client that
said `acks` in its hello answers each ping when it has read everything before it. The
oldest unanswered ping says how stale that client's screen is, however much the kernel
buffers on the way; the sender stops pushing while it is too old, and a client whose
frames wait too long is cut over to a gap and a small snapshot.
"""

from __future__ import annotations

import asyncio
import itertools

PING_EVERY_S = 0.25
HOLD_AFTER_S = 0.5
"""An unanswered ping this old: send nothing more until the client has read what it has."""
STALE_AFTER_S = 1.0
"""A queued frame this old, or one send that blocked this long: the client fell behind."""


class ClientPace:
    def __init__(self, acks: bool) -> None:
        self.acks = acks
        """The client answers pings (our dashboard's live.js does)."""
        self.pings: dict[int, float] = {}
        self.last_ping = 0.0
        self.answered = asyncio.Event()
        self._ids = itertools.count(1)

    def behind(self, now: float) -> float:
        """Seconds since the oldest ping the client has not answered yet."""
        return now - min(self.pings.values()) if self.pings else 0.0

    def holding(self, now: float) -> bool:
        return self.acks and self.behind(now) > HOLD_AFTER_S

    def ping_due(self, now: float) -> int | None:
        """The id of a ping to send now, or None."""
        if not self.acks or now - self.last_ping < PING_EVERY_S:
            return None
        ping = next(self._ids)
        self.pings[ping] = self.last_ping = now
        return ping

    def pong(self, ping: object) -> bool:
        """The client read everything up to ping `ping`. False if that is not a ping id."""
        if isinstance(ping, bool) or not isinstance(ping, int):
            return False
        for key in [k for k in self.pings if k <= ping]:
            del self.pings[key]
        self.answered.set()
        return True
