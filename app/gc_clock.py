"""GcClock: cyclic garbage collection on a clock instead of on allocation counts, for a
process whose live state is large and long-lived (the recorder's writer: the fold of a
70,000-request queue) while its work allocates in bursts that outlive the young
generations (a batch of thousands of parsed frames). Counted collections then kept
walking the whole heap: a third of the writer at 100,000 requests, and 32% of its time
replaying a 20,000-request recording's frames.

Each tick that is due collects the young generations (what was made since the last
tick: a batch's garbage); the whole heap is walked only every `full_every_s`, since a
walk of the fold of a long queue is what cost (14% of the writer at 100,000 requests with
a full collection every 5 s). The process's own objects hold no cycles (reference
counting frees them); what cycles libraries make waits for the next tick, or for the
next full one once it has survived a young collection.

The web process runs one too (`ticking`, on its loop): a seek folds thousands of frames
into objects that outlive the young generations, and with counted collections a full
one walked the live sessions' state every ~25 seeks of a 20,000-request recording
(130-190 ms each: the seeks' p99)."""

from __future__ import annotations

import asyncio
import gc
import time

EVERY_S = 5.0
FULL_EVERY_S = 60.0


class GcClock:
    def __init__(self, every_s: float = EVERY_S, full_every_s: float = FULL_EVERY_S) -> None:
        """Turns the automatic collector off for the whole process."""
        self.every_s = every_s
        self.full_every_s = full_every_s
        self.collected_at = self.full_at = time.monotonic()
        self.was_enabled = gc.isenabled()
        gc.disable()

    def stop(self) -> None:
        """Counted collections back on, if they were before."""
        if self.was_enabled:
            gc.enable()

    async def ticking(self, period_s: float = 1.0) -> None:
        """`tick` every `period_s` on the running loop, until cancelled."""
        while True:
            await asyncio.sleep(period_s)
            self.tick()

    def tick(self) -> None:
        """Collect the young generations if `every_s` has passed since the last
        collection; every generation if `full_every_s` has passed since the last full one."""
        now = time.monotonic()
        if now - self.collected_at < self.every_s:
            return
        if now - self.full_at >= self.full_every_s:
            gc.collect()
            self.full_at = time.monotonic()
        else:
            gc.collect(1)
        self.collected_at = time.monotonic()
