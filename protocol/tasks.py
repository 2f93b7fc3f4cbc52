"""Ending asyncio tasks for certain, so that a stop is never held up by one of them.

`task.cancel()` then `await task` under `suppress(BaseException)` can hang forever: a task
may swallow its cancellation (Python 3.11's `asyncio.wait_for` loses one that races the
result it waits for, gh-86296; nats-py's `fetch` waits that way, so a pull loop under load
goes on pulling), and the suppress then swallows the caller's own cancellation too, so no
bound around the stop (`asyncio.wait_for(stop, 30)`) can end it. A shutdown step hung
that way, silently, with a busy dashboard; and nats-py's connect loop retries a refused
connect forever, so a vLLM node's sender, closed while its bus was away, lived on.

Standard library only, here beside the wire so that both ends of it (the dashboard and the
vLLM adapter's transports) end their tasks the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

NUDGE_S = 0.5
"""A task that swallowed its cancellation is cancelled again this often."""


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]], nudge_s: float = NUDGE_S) -> None:
    """Cancel `tasks` and return once every one has ended, cancelling again any that goes
    on. What they raised is retrieved (never logged as unretrieved) and dropped. The
    caller's own cancellation is not swallowed: a bound around this call holds."""
    tasks = list(tasks)
    pending = {t for t in tasks if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=nudge_s)
    for task in tasks:
        if not task.cancelled():
            task.exception()
