"""Processes the tests start die with the test run, and take Ctrl-C as from a terminal.

A test run that is killed (a CI timeout, Ctrl-C twice, an OOM kill) runs no fixture
teardown, so every `serve`, node or sweep it had started would go on, many of them flat
out, and load the machine for every run after it. `Popen(..., preexec_fn=die_with_us())`
asks the kernel (Linux PR_SET_PDEATHSIG) to SIGKILL the child when the process that
started it goes. The product's own children follow: the engine process and the
recorder's writer die with their dashboard (app.cli.engine_link, app.db.writer_process).

Start children from the main thread: the kernel ties the signal to the thread that forked.

A run started in the background (`make soak`'s side run, `nohup`, `&` in a script) inherits
SIGINT ignored, and passes that on to everything it starts (an ignored signal stays
ignored across exec): the tests that press Ctrl-C (SIGINT to a server's or a sweep's
group) would find it ignored. `take_ctrl_c` gives the run what a terminal gives.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def take_ctrl_c() -> None:
    """SIGINT raises KeyboardInterrupt again where the run inherited it ignored; children
    started after this get SIGINT's default (a handler is reset at exec, an ignore is not)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
