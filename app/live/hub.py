"""EventHub: assigns seq, encodes each frame once, folds it into the session's state and
fans it out to subscribers through bounded queues. It never awaits a client.

A subscriber whose queue overflows loses its queued frames and is flagged; its sender
then sends a `gap` frame and a fresh snapshot instead of a silently incomplete stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.frames.fold import SessionState
from protocol.codes import FrameType, SessionEvent
from protocol.envelope import encode, envelope
from protocol.wire import SessionMeta

DEFAULT_QUEUE_FRAMES = 512
IDLE_SWITCH_S = 2.0

FrameListener = Callable[[str, str, int, Mapping[str, Any], str], None]
"""fn(session, frame_type, seq, data, encoded frame): the recorder, relay and metrics."""


@dataclass(eq=False)
class Subscriber:
    """One consumer: a bounded queue of encoded frames for one session (or 'follow')."""

    session: str | None
    """None: follow whichever session is live now."""
    maxsize: int = DEFAULT_QUEUE_FRAMES
    queue: asyncio.Queue[tuple[str, int, str, float]] = field(init=False)
    """(session, seq, encoded frame, monotonic time it was published)."""
    gap: bool = False
    dropped: int = 0
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.queue = asyncio.Queue(self.maxsize)

    def offer(self, session: str, seq: int, text: str, at: float = 0.0) -> None:
        if self.gap:
            self.dropped += 1
            return
        try:
            self.queue.put_nowait((session, seq, text, at))
        except asyncio.QueueFull:
            # Drop what is queued: the next thing this client gets is a snapshot.
            self.dropped += self.queue.qsize() + 1
            while not self.queue.empty():
                self.queue.get_nowait()
            self.gap = True
        self.wakeup.set()

    def fall_behind(self) -> None:
        """This client cannot keep up: drop what is queued; it resyncs with a snapshot."""
        self.dropped += self.queue.qsize()
        while not self.queue.empty():
            self.queue.get_nowait()
        self.gap = True
        self.wakeup.set()

    def oldest_age(self, now: float) -> float:
        """Seconds the oldest queued frame has waited (0 when none is queued)."""
        if self.queue.empty():
            return 0.0
        oldest: float = self.queue._queue[0][3]  # type: ignore[attr-defined]
        return now - oldest


@dataclass
class SessionInfo:
    session: str
    meta: SessionMeta
    fold: SessionState
    """The session's frames folded: its current state."""
    live: bool = True
    last_frame_at: float = field(default_factory=time.monotonic)
    frames: int = 0
    snapshots: dict[tuple[int, bool, bool], str] = field(default_factory=dict)
    """Encoded snapshot frames of the latest seq, by (seq, compact, columns)."""


class EventHub:
    def __init__(self) -> None:
        self.sessions: dict[str, SessionInfo] = {}
        self.live_session: str | None = None
        self.follow_most_active = False
        """No local engine: followers watch whichever live session was active last."""
        self._relayed: set[str] = set()
        self._subscribers: set[Subscriber] = set()
        self._listeners: list[FrameListener] = []

    # ----------------------------------------------------------- sessions
    def open_session(
        self, session: str, meta: SessionMeta, live: bool = True, announce: bool = True
    ) -> SessionState:
        """Register a session; `live` ones become the one followers watch. `announce`
        publishes its `opened` mark (an ingesting producer sends its own)."""
        state = SessionState(session, meta)
        self.sessions[session] = SessionInfo(session, meta.copy(), state)
        if not live:
            if announce:
                self.publish(session, FrameType.SESSION, {"event": SessionEvent.OPENED, **meta})
            return state
        self.live_session = session
        for sub in self._subscribers:
            if sub.session is None:
                # Followers switch sessions through a fresh snapshot.
                sub.gap = True
                sub.wakeup.set()
        if announce:
            self.publish(session, FrameType.SESSION, {"event": SessionEvent.OPENED, **meta})
        return state

    def close_session(self, session: str) -> None:
        info = self.sessions.get(session)
        if info is not None and info.live:
            self.publish(session, FrameType.SESSION, {"event": SessionEvent.CLOSED})
            info.live = False

    def live_state(self, session: str | None = None) -> SessionState | None:
        sid = session or self.live_session
        info = self.sessions.get(sid) if sid else None
        return info.fold if info else None

    def add_listener(self, fn: FrameListener) -> None:
        """`fn` is called for every frame, in order, after subscribers got it."""
        self._listeners.append(fn)

    # ------------------------------------------------------------ publish
    def mark_relayed(self, session: str) -> None:
        """Frames of this session come from another dashboard process (not ours to record)."""
        self._relayed.add(session)

    def is_relayed(self, session: str) -> bool:
        return session in self._relayed

    def adopt_session(self, fold: SessionState, meta: SessionMeta, live: bool) -> None:
        """Continue a recorded session (a node reconnecting after a dashboard restart)."""
        self.sessions[fold.session] = SessionInfo(fold.session, meta.copy(), fold)
        if live and self.live_session is None:
            self.live_session = fold.session

    def publish(
        self,
        session: str,
        frame_type: str,
        data: Mapping[str, Any],
        seq: int | None = None,
        data_json: str | None = None,
    ) -> int:
        """Sync and non-blocking: fold, encode once, enqueue everywhere. Returns seq.

        `seq` is given only for ingested frames, whose producer owns the numbering; a
        jump there is a real, visible gap (clients resync through a snapshot)."""
        info = self.sessions[session]
        if self.follow_most_active and session != self.live_session and info.live:
            self._maybe_follow(session)
        if seq is None:
            seq = info.fold.seq + 1
        elif seq <= info.fold.seq:
            raise ValueError(f"seq {seq} is not after {info.fold.seq}")
        info.fold.apply(frame_type, seq, data)
        info.frames += 1
        info.last_frame_at = now = time.monotonic()
        if data_json is None:
            data_json = encode(data)
        text = envelope(frame_type, session, seq, data_json, ts=round(time.time(), 6))
        for sub in self._subscribers:
            if sub.session == session or (sub.session is None and session == self.live_session):
                sub.offer(session, seq, text, now)
        for fn in self._listeners:
            fn(session, frame_type, seq, data, text)
        return seq

    def _maybe_follow(self, session: str) -> None:
        current = self.sessions.get(self.live_session) if self.live_session else None
        idle = (
            current is None
            or not current.live
            or (time.monotonic() - current.last_frame_at > IDLE_SWITCH_S)
        )
        if not idle:
            return
        self.live_session = session
        for sub in self._subscribers:
            if sub.session is None:
                sub.gap = True
                sub.wakeup.set()

    def snapshot_frame(
        self, session: str, compact: bool = False, columns: bool = False
    ) -> tuple[int, str]:
        """The session's snapshot frame now: (seq, text). `compact`: recent history and
        finished rows only (a client resyncing after it fell behind gets a small one);
        `columns`: request rows as columns. Built once per seq and form: tabs that join at
        the same step (a paused or ended session, a burst of joiners) share the text."""
        info = self.sessions[session]
        state = info.fold
        key = (state.seq, compact, columns)
        text = info.snapshots.get(key)
        if text is None:
            snap = state.snapshot_json(compact=compact, columns=columns)
            text = envelope(FrameType.SNAPSHOT, session, state.seq, snap, ts=round(time.time(), 6))
            info.snapshots = {k: v for k, v in info.snapshots.items() if k[0] == state.seq}
            info.snapshots[key] = text
        return state.seq, text

    # -------------------------------------------------------- subscribers
    def watchers(self, session: str) -> int:
        """Clients watching `session` now (its own, or following it as the live one)."""
        return sum(
            1
            for sub in self._subscribers
            if sub.session == session or (sub.session is None and session == self.live_session)
        )

    @contextlib.asynccontextmanager
    async def subscribe(
        self, session: str | None, maxsize: int = DEFAULT_QUEUE_FRAMES
    ) -> AsyncIterator[Subscriber]:
        sub = Subscriber(session, maxsize)
        self._subscribers.add(sub)
        try:
            yield sub
        finally:
            self._subscribers.discard(sub)
