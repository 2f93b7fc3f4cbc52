"""What every producer of a session's frames keeps (docs/protocol.md), sans I/O: the
session's seq, a bounded history of its encoded frames, what it lost (drops and gaps), the
resend after the `last_seq` a dashboard says it has, the handshake and the stats message.

`batchscope engine --push` and its fleet-bus node (app.nodes.producer, app.bus.node), the
dashboard's own engine process (app.nodes.engine_host), a re-run's engine process
(app.records.rerun_process) and the vLLM adapter's senders (batchscope_vllm.sender,
batchscope_vllm.bus) each drive one over their own transport and thread. It opens no
socket and takes no lock: it belongs to the one thread (or event loop) that feeds and
drains it.

Each frame is enveloped and encoded once, here (`add`). A seq given no frame (`hole`) is
what a dashboard marks as a gap; a frame that leaves the history before the transport took
it is lost too. Both count in `dropped`.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol import control
from protocol.codes import MessageType
from protocol.envelope import envelope

Held = tuple[int, str]
"""(seq, the frame's text as `envelope()` built it)."""


class Refused(ConnectionError):
    """The dashboard answered the announce with something other than a welcome."""


@dataclass(slots=True)
class Resend:
    """What goes out after a (re)connect: the frames after the dashboard's `last_seq` still
    held, oldest first, and how many seqs after it are not (the dashboard marks them as a
    gap when the next frame arrives)."""

    frames: list[Held]
    lost: int


@dataclass(slots=True)
class ProducerCore:
    """One session's frames as its producer keeps them. The history is bounded by frames,
    by characters (= bytes: the JSON is ASCII) and by age, whichever bounds are given; it
    always keeps the newest frame. With `keep_sent=False` (a reliable link that never
    resends) a frame leaves it as soon as the transport took it: the history is the
    outbox."""

    session: str
    node: str
    max_frames: int | None = None
    max_chars: int | None = None
    max_age_s: float | None = None
    keep_sent: bool = True
    seq: int = 0
    """The newest seq given out (to a frame or to a hole)."""
    sent: int = 0
    """The newest seq the transport took, or the dashboard said it has: resending starts
    after it."""
    resume_key: str | None = None
    """Issued by the dashboard with the first welcome: resuming the session needs it."""
    connects: int = 0
    lost_in_history: int = 0
    """Frames that left the history before the transport took them."""
    lost_in_holes: int = 0
    """What the holes stand for (a producer that drops before numbering counts its drops)."""
    chars: int = 0
    history: deque[Held] = field(default_factory=deque)
    times: deque[float] = field(default_factory=deque)
    """The time each held frame was added (`now` of add()), for the age bound and windows."""

    # ------------------------------------------------------------------ frames
    def add(self, frame_type: str, data_json: str, now: float = 0.0) -> Held:
        """Number, envelope and hold one frame (`data_json`: its data, encoded once)."""
        self.seq += 1
        text = envelope(frame_type, self.session, self.seq, data_json)
        self.history.append((self.seq, text))
        self.times.append(now)
        self.chars += len(text)
        self._trim(now)
        return self.seq, text

    def hole(self, lost: int = 1) -> None:
        """Give a seq no frame, for `lost` things dropped before they became frames."""
        self.seq += 1
        self.lost_in_holes += lost

    def _trim(self, now: float) -> None:
        history, times = self.history, self.times
        max_frames, max_chars, max_age = self.max_frames, self.max_chars, self.max_age_s
        while len(history) > 1 and (
            (max_frames is not None and len(history) > max_frames)
            or (max_chars is not None and self.chars > max_chars)
            or (max_age is not None and now - times[0] > max_age)
        ):
            self._evict()

    def _evict(self) -> None:
        seq, text = self.history.popleft()
        self.times.popleft()
        self.chars -= len(text)
        if seq > self.sent:
            self.lost_in_history += 1

    def __len__(self) -> int:
        return len(self.history)

    @property
    def oldest(self) -> int:
        """The oldest seq held (0 when none is)."""
        return self.history[0][0] if self.history else 0

    def _index_after(self, seq: int) -> int:
        return bisect.bisect_right(self.history, seq, key=_seq_of)

    def first_at(self, t: float) -> int:
        """The first seq held that was added at or after time `t` (0: none)."""
        i = bisect.bisect_left(self.times, t)
        return self.history[i][0] if i < len(self.history) else 0

    def after(self, seq: int, max_chars: int | None = None, limit: int | None = None) -> list[Held]:
        """The frames held after `seq`, oldest first: at most `limit` of them and about
        `max_chars` of text (always at least one, if any)."""
        history = self.history
        if not history or history[-1][0] <= seq:
            return []
        out: list[Held] = []
        size = 0
        for i in range(self._index_after(seq), len(history)):
            held = history[i]
            if out and (
                (max_chars is not None and size + len(held[1]) > max_chars)
                or (limit is not None and len(out) >= limit)
            ):
                break
            out.append(held)
            size += len(held[1]) + 1
        return out

    def pending(self, max_chars: int | None = None, limit: int | None = None) -> list[Held]:
        """The frames held that the transport has not taken yet (see after())."""
        if limit is not None and limit <= 0:
            return []
        return self.after(self.sent, max_chars, limit)

    def mark_sent(self, seq: int) -> None:
        """The transport took every frame through `seq` (a reliable link: they leave)."""
        self.sent = seq
        if not self.keep_sent:
            while self.history and self.history[0][0] <= seq:
                self._evict()

    @property
    def buffered(self) -> int:
        """Frames held that the transport has not taken yet."""
        return len(self.history) - self._index_after(self.sent)

    @property
    def dropped(self) -> int:
        return self.lost_in_history + self.lost_in_holes

    # --------------------------------------------------------------- handshake
    def hello(self, extra: Mapping[str, Any]) -> dict[str, Any]:
        """The announce that opens a connection: `extra` (what the producer says of
        itself), this session and node, and the resume key once the dashboard gave one."""
        hello: dict[str, Any] = {**extra, **control.announce(self.session, self.node)}
        if self.resume_key:
            hello["resume_key"] = self.resume_key
        return hello

    def welcome(self, msg: object) -> Resend:
        """The dashboard's answer to hello(): take its resume key and resend after its
        `last_seq`. Refused (a ConnectionError) if it is no welcome."""
        if not isinstance(msg, dict) or msg.get("type") != MessageType.WELCOME:
            raise Refused(f"dashboard refused: {msg}")
        self.resume_key = msg.get("resume_key") or self.resume_key
        self.connects += 1
        return self.resend(int(msg.get("last_seq") or 0))

    def resend(self, last_seq: int) -> Resend:
        """The peer has every frame through `last_seq`: what follows, and what is lost."""
        self.sent = last_seq
        frames = self.after(last_seq)
        return Resend(frames, max(self.seq - last_seq, 0) - len(frames))

    def stats(self) -> control.Stats:
        """The stats message a producer sends now and then."""
        return control.stats(self.buffered, self.dropped)


def _seq_of(held: Held) -> int:
    return held[0]
