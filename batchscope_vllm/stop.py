"""End the session when vLLM's engine core is told to stop (SIGINT, SIGTERM).

vLLM calls its scheduler's `shutdown()` only at the end of the engine core's teardown
(after its model executor's, which waits seconds for the workers), and the API server often
kills the engine-core process before that (0.32/0.33: at once with the default
`--shutdown-timeout 0`). The signal itself is the earliest sign of a clean stop: vLLM's
`run_engine_core` installs Python handlers for SIGINT and SIGTERM in the engine-core
process before it builds the scheduler. `chain_stop_signals` puts a handler in front of
each of them that calls the adapter first and then vLLM's own, unchanged. The adapter
sets flags, wakes the sender thread (a pipe write) and waits a bounded time for it to
deliver the closing frame, on an Event nothing else on the engine thread touches: no lock
the interrupted engine thread may hold is taken.

Anywhere else (a process whose SIGTERM handler is not a Python function: an in-process
LLM, a test, not the main thread) nothing is installed, and `shutdown()` ends the session.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _python_handler(handler: Any) -> bool:
    """A handler some Python code installed (not SIG_DFL, SIG_IGN, None, nor Python's own
    KeyboardInterrupt raiser)."""
    return callable(handler) and handler is not signal.default_int_handler


def chain_stop_signals(on_stop: Callable[[], None]) -> bool:
    """In vLLM's engine-core process (the main thread, with a Python SIGTERM handler),
    run `on_stop()` at SIGINT/SIGTERM before the handler in place. Returns whether the
    handlers were chained. `on_stop` must take no lock the interrupted thread may hold and
    wait only briefly; its exceptions are swallowed (a stop never becomes an error)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if not _python_handler(signal.getsignal(signal.SIGTERM)):
        return False
    for sig in SIGNALS:
        previous = signal.getsignal(sig)
        if _python_handler(previous):
            signal.signal(sig, _chained(on_stop, previous))
    return True


def _chained(on_stop: Callable[[], None], previous: Any) -> Callable[[int, FrameType | None], Any]:
    def handler(signum: int, frame: FrameType | None) -> Any:
        # Never raise into vLLM's stop; nothing is logged here (logging takes locks).
        with contextlib.suppress(Exception):
            on_stop()
        return previous(signum, frame)

    handler.batchscope_previous = previous  # type: ignore[attr-defined]
    return handler
