"""GcClock: cyclic garbage collection on a clock instead of on allocation counts, for a
process whose live state is large and long-lived (the recorder's writer: the fold of a
70,000-request queue) while its work allocates in bursts that outlive the young
generations (a batch of thousands of parsed frames). Counted collections then kept
walking the whole heap: a third of the writer at 100,000 requests, and 32% of its time
replaying a 20,000-request recording's frames. The process's own objects hold no cycles
(reference counting frees them); what cycles libraries make waits for the next tick."""

from __future__ import annotations

import gc
import time

EVERY_S = 5.0


class GcClock:
    def __init__(self, every_s: float = EVERY_S) -> None:
        """Turns the automatic collector off for the whole process."""
        self.every_s = every_s
        self.collected_at = time.monotonic()
        gc.disable()

    def tick(self) -> None:
        """Collect if `every_s` has passed since the last collection."""
        if time.monotonic() - self.collected_at >= self.every_s:
            gc.collect()
            self.collected_at = time.monotonic()
