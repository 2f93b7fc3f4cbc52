"""How far behind a viewer is, by time: the server pings in the stream (after every batch)
and a client that said `acks` in its hello answers each ping when it has read everything
before it. The oldest unanswered ping says how stale that client's screen is, however
much the kernel buffers on the way. The sender keeps at most WINDOW_BYTES unanswered and
stops while a ping is older than HOLD_AFTER_S; a client whose frames wait too long is cut
over to a gap and a small snapshot.
"""

from __future__ import annotations

import asyncio
import itertools

WINDOW_BYTES = 64 * 1024
"""Bytes sent but not yet answered: a slow link never holds more than ~a second of them."""
MAX_BATCH_BYTES = 32 * 1024
HOLD_AFTER_S = 0.5
"""An unanswered ping this old: send nothing more until the client has read what it has."""


class ClientPace:
    def __init__(self, acks: bool) -> None:
        self.acks = acks
        """The client answers pings (our dashboard's live.js does)."""
        self.pings: dict[int, tuple[float, int]] = {}
        """Unanswered pings: id -> (when sent, bytes sent before it)."""
        self.sent_bytes = 0
        self.acked_bytes = 0
        self.answered = asyncio.Event()
        self._ids = itertools.count(1)

    def behind(self, now: float) -> float:
        """Seconds since the oldest ping the client has not answered yet."""
        return now - min(t for t, _ in self.pings.values()) if self.pings else 0.0

    def in_flight(self) -> int:
        return self.sent_bytes - self.acked_bytes

    def holding(self, now: float) -> bool:
        """Send nothing more for now: the client has not read what it has."""
        if not self.acks:
            return False
        return self.in_flight() > WINDOW_BYTES or self.behind(now) > HOLD_AFTER_S

    def sent(self, nbytes: int) -> None:
        self.sent_bytes += nbytes

    def ping(self, now: float) -> int | None:
        """The id of a ping to send now (after what was just sent), or None."""
        if not self.acks:
            return None
        ping = next(self._ids)
        self.pings[ping] = (now, self.sent_bytes)
        return ping

    def pong(self, ping: object) -> bool:
        """The client read everything up to ping `ping`. False if that is not a ping id."""
        if isinstance(ping, bool) or not isinstance(ping, int):
            return False
        for key in [k for k in self.pings if k <= ping]:
            self.acked_bytes = max(self.acked_bytes, self.pings.pop(key)[1])
        self.answered.set()
        return True
