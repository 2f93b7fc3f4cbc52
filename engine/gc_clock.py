"""GcClock: cyclic garbage collection on a clock instead of on allocation counts, for a
process whose live state is large and long-lived while its work allocates in bursts that
outlive the young generations. Counted collections then kept walking the whole heap:
- a simulation's scheduler queue (engine.simulate.drive runs one): 16% of a flat-out
  20,000-request sweep point, a quarter of the engine process `serve` spawns with
  100,000 requests waiting (app.cli.common: every engine process);
- the recorder's writer (the fold of a 70,000-request queue): a third of it at 100,000
  requests, 32% of its time replaying a 20,000-request recording's frames;
- the web process (`ticking`, on its loop): a seek folds thousands of frames into objects
  that outlive the young generations, and a full collection walked the live sessions'
  state every ~25 seeks of a 20,000-request recording (130-190 ms each: the seeks' p99).

Each tick that is due collects the young generations (what was made since the last
tick); the whole heap is walked only every `full_every_s`. Our own objects hold no cycles
(reference counting frees them); what cycles libraries make waits for the next tick, or
for the next full one once it has survived a young collection.

The automatic collector is off while any clock of the process runs (a simulation in the
web process's lab thread runs one beside the web's): the last one stopped turns it back
on if it was on before the first started."""

from __future__ import annotations

import asyncio
import gc
import threading
import time

EVERY_S = 5.0
FULL_EVERY_S = 60.0

_lock = threading.Lock()
_running = 0
"""Clocks of this process not stopped."""
_was_enabled = True
"""Whether counted collections were on when the first of them started."""


class GcClock:
    def __init__(self, every_s: float = EVERY_S, full_every_s: float = FULL_EVERY_S) -> None:
        """Turns the automatic collector off for the whole process."""
        global _running, _was_enabled
        self.every_s = every_s
        self.full_every_s = full_every_s
        self.collected_at = self.full_at = time.monotonic()
        self.stopped = False
        with _lock:
            if _running == 0:
                _was_enabled = gc.isenabled()
            _running += 1
            gc.disable()

    def stop(self) -> None:
        """This clock is done: counted collections back on once no clock of the process
        runs, if they were on before the first (a second stop does nothing)."""
        global _running
        with _lock:
            if self.stopped:
                return
            self.stopped = True
            _running -= 1
            if _running == 0 and _was_enabled:
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
