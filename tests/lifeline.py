"""Processes the tests start die with the test run.

A test run that is killed (a CI timeout, Ctrl-C twice, an OOM kill) runs no fixture
teardown, so every `serve`, node or sweep it had started would go on, many of them flat
out, and load the machine for every run after it. `Popen(..., preexec_fn=die_with_us())`
asks the kernel (Linux PR_SET_PDEATHSIG) to SIGKILL the child when the process that
started it goes. The product's own children follow: the engine process and the
recorder's writer die with their dashboard (app.cli.engine_link, app.db.writer_process).

Start children from the main thread: the kernel ties the signal to the thread that forked.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def die_with_us() -> Callable[[], None] | None:
    """A `preexec_fn` for Popen; None where the kernel has no such request (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the child only makes the call
    prctl = libc.prctl
    parent = os.getpid()

    def _in_child() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # we went between the fork and the request
            os._exit(1)

    return _in_child
