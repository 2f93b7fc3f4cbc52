"""A wake-up for the sender thread's sleep: a byte written to a pipe cuts it short.

`wake()` takes no lock (a write to a non-blocking pipe), so it is safe in a signal handler;
`sleep()` waits in select(), so the GIL is released meanwhile. The pipe lives as long as
the process (a closed fd number could be reused).
"""

from __future__ import annotations

import contextlib
import os
import select


class Wakeup:
    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)

    def wake(self) -> None:
        """Cut the current (or the next) sleep short."""
        with contextlib.suppress(OSError):  # full (a wake-up is pending anyway)
            os.write(self._w, b"\0")

    def sleep(self, timeout: float) -> None:
        """Up to `timeout` s, less if woken; the GIL is released meanwhile."""
        ready, _, _ = select.select([self._r], [], [], timeout)
        if ready:
            with contextlib.suppress(OSError):
                os.read(self._r, 4096)
