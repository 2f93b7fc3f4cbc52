"""The node's flight recorder: its last frames (by count and by age), encoded once, from
which full detail is streamed when a dashboard opens the node or asks for a window."""

from __future__ import annotations

import bisect
import time
from collections import deque


class FlightRecorder:
    def __init__(self, max_frames: int = 50_000, max_age_s: float = 300.0) -> None:
        self.max_frames = max_frames
        self.max_age_s = max_age_s
        self._seqs: deque[int] = deque()
        self._times: deque[float] = deque()
        self._texts: deque[str] = deque()
        self.dropped = 0
        """Frames that aged or were pushed out before any dashboard stored them."""

    def __len__(self) -> int:
        return len(self._seqs)

    def append(self, seq: int, text: str, now: float | None = None) -> None:
        now = time.time() if now is None else now
        self._seqs.append(seq)
        self._times.append(now)
        self._texts.append(text)
        while len(self._seqs) > self.max_frames or (
            self._times and now - self._times[0] > self.max_age_s
        ):
            self._seqs.popleft()
            self._times.popleft()
            self._texts.popleft()

    @property
    def oldest(self) -> int:
        """The oldest seq held (0 when empty)."""
        return self._seqs[0] if self._seqs else 0

    def first_at(self, t: float) -> int:
        """The first seq held that was recorded at or after wall time `t` (0: none)."""
        i = bisect.bisect_left(self._times, t)
        return self._seqs[i] if i < len(self._seqs) else 0

    def after(self, seq: int, max_bytes: int) -> list[tuple[int, str]]:
        """Frames after `seq`, oldest first, up to about `max_bytes` of text (at least one)."""
        if not self._seqs or seq >= self._seqs[-1]:
            return []
        start = max(0, seq + 1 - self._seqs[0])  # seqs are consecutive
        out: list[tuple[int, str]] = []
        size = 0
        for i in range(start, len(self._seqs)):
            text = self._texts[i]
            if out and size + len(text) > max_bytes:
                break
            out.append((self._seqs[i], text))
            size += len(text) + 1
        return out
