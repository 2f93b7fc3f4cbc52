"""Recorder: one more hub listener. Frames are buffered on the event loop (a list append)
and written in batches off the loop: by a writer process when the database is a file or a
server (so writes, and the fold that makes periodic checkpoints, never compete with the
engine thread for the GIL), else by a worker thread. Neither the engine thread nor the
loop waits on the database.

Nothing is dropped silently: while the database is away the batch is kept and retried
with backoff; a frame the database refuses is set aside alone (quarantined), counted and
reported to whoever listens (`on_rejected`: the node registry tells the producer), and
never holds back any other frame. `health()` says what is waiting, counting the batch
being written, and for how long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.db.migrate import is_memory_url
from app.db.quarantine import Rejected
from app.db.writer_process import (
    TextFrame,
    Writer,
    WriteResult,
    recorder_id,
    start_writer,
    write_texts,
)
from app.live.health import Check
from app.live.hub import EventHub

log = logging.getLogger("batchscope.recorder")

CHECKPOINT_EVERY = 250
"""Frames between checkpoints: a seek folds at most this many after the nearest one."""
FLUSH_INTERVAL_S = 0.25
MAX_BATCH = 5000
STALE_AFTER_S = 10.0
"""Unhealthy when a frame has waited this long to be written."""
MAX_BACKOFF_S = 5.0
WRITER_EXIT_S = 30.0
"""At stop, how long the writer process may take to finish its last write and exit."""

RejectListener = Callable[[Rejected], None]


class Recorder:
    def __init__(
        self,
        hub: EventHub,
        sessions: sessionmaker[Session],
        checkpoint_every: int = CHECKPOINT_EVERY,
        flush_interval: float = FLUSH_INTERVAL_S,
        database_url: str | None = None,
    ) -> None:
        """With `database_url` (not an in-memory one), writes go to a writer process."""
        self.hub = hub
        self.sessions = sessions
        self.database_url = database_url
        self._writer: ProcessPoolExecutor | None = None
        self._local = Writer(sessions, checkpoint_every, recorder_id())
        if database_url is not None and not is_memory_url(database_url):
            self._writer = start_writer(database_url, checkpoint_every)
        self.checkpoint_every = checkpoint_every
        self.flush_interval = flush_interval
        self.pending: list[TextFrame] = []
        self._pending_since: deque[float] = deque()
        self.in_flight: list[TextFrame] = []
        self._in_flight_since = 0.0
        self.written = 0
        self.failures = 0
        self.consecutive_failures = 0
        self.last_error: str | None = None
        self.rejected: deque[Rejected] = deque(maxlen=100)
        self.num_rejected = 0
        self.on_rejected: list[RejectListener] = []
        self.sessions_seen: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._stopping = False
        self._wake = asyncio.Event()
        hub.add_listener(self.on_frame)

    @property
    def writing(self) -> int:
        """Frames of the batch being written now."""
        return len(self.in_flight)

    @property
    def lag(self) -> int:
        """Frames received but not yet in the database, the batch being written included."""
        return len(self.pending) + len(self.in_flight)

    def lag_seconds(self) -> float:
        """How long the oldest frame not yet in the database has waited."""
        now = time.monotonic()
        if self.in_flight:
            return now - self._in_flight_since
        return now - self._pending_since[0] if self.pending and self._pending_since else 0.0

    def on_frame(
        self, session: str, frame_type: str, seq: int, data: Mapping[str, Any], text: str
    ) -> None:
        if self.hub.is_relayed(session):
            return  # its origin process records it
        del data  # the writer re-parses the text, off this loop (in its own process)
        if not self.pending:
            self._pending_since.clear()
            self._pending_since.append(time.monotonic())
        self.pending.append(TextFrame(session, frame_type, seq, text))
        self.sessions_seen.add(session)
        if len(self.pending) >= MAX_BATCH:
            self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="recorder")

    async def stop(self, timeout: float | None = None) -> bool:
        """Stop the periodic flusher without interrupting a write in progress (its thread
        would go on writing), then write everything still pending (retrying a database
        that is away, for up to `timeout` seconds). True if nothing is left unwritten."""
        if self._task is not None:
            self._stopping = True
            self._wake.set()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            async with self._lock:
                await self._flush_locked()
            if not self.pending or (deadline is not None and time.monotonic() > deadline):
                break
            if deadline is None and self.consecutive_failures >= 3:
                break
        if self._writer is not None:
            writer, self._writer = self._writer, None
            await _end_writer(writer, WRITER_EXIT_S)
        return not self.pending

    async def _run(self) -> None:
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.flush_interval)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Write what is pending; one write at a time."""
        async with self._lock:
            await self._flush_locked()

    async def _flush_locked(self) -> None:
        while self.pending:
            batch = self.pending[:MAX_BATCH]
            del self.pending[:MAX_BATCH]
            self.in_flight, self._in_flight_since = batch, self._pending_since[0]
            self._pending_since.clear()
            if self.pending:
                self._pending_since.append(time.monotonic())
            try:
                result = await self._write(batch)
            except Exception as exc:  # the database is away: keep the frames, retry later
                self.failures += 1
                self.consecutive_failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"[:500]
                log.warning(
                    "recording write failed (%s frames kept for retry): %s",
                    len(batch),
                    self.last_error,
                )
                self.pending[:0] = batch
                self._pending_since.clear()
                self._pending_since.append(self._in_flight_since)
                self.in_flight = []
                backoff = 0.2 * 2 ** min(self.consecutive_failures, 5)
                await asyncio.sleep(min(MAX_BACKOFF_S, backoff))
                return
            self.in_flight = []
            self.consecutive_failures = 0
            self.written += result.written
            for item in result.rejected:
                self._reject(item)

    async def write_now(self, batch: list[TextFrame], attempts: int = 8) -> None:
        """Write frames that are not the hub's (a re-run's), between the periodic
        flushes, retrying a database that is away; raises after `attempts` failures."""
        for attempt in range(attempts):
            async with self._lock:
                try:
                    result = await self._write(batch)
                except Exception as exc:
                    self.failures += 1
                    self.last_error = f"{type(exc).__name__}: {exc}"[:500]
                    if attempt == attempts - 1:
                        raise
                else:
                    self.written += result.written
                    for item in result.rejected:
                        self._reject(item)
                    return
            await asyncio.sleep(min(MAX_BACKOFF_S, 0.2 * 2**attempt))

    async def _write(self, batch: list[TextFrame]) -> WriteResult:
        if self._writer is None:
            return await asyncio.to_thread(self._local.write, batch)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._writer, write_texts, batch)
        except BrokenProcessPool:
            # The writer process died (killed, out of memory): start a new one; the batch
            # is retried (its transaction never committed or was the last thing it did).
            assert self.database_url is not None
            self._writer.shutdown(wait=False)
            self._writer = start_writer(self.database_url, self.checkpoint_every)
            raise

    def _reject(self, item: Rejected) -> None:
        self.num_rejected += 1
        self.rejected.append(item)
        log.warning("frame %s of %s set aside: %s", item.seq, item.session, item.reason)
        for fn in self.on_rejected:
            fn(item)

    # --------------------------------------------------------------- health
    def healthy(self) -> bool:
        return self.consecutive_failures == 0 and self.lag_seconds() < STALE_AFTER_S

    def status(self) -> dict[str, Any]:
        """What /healthz shows: real lag (the batch being written included) and failures."""
        return {
            "ok": self.healthy(),
            "written": self.written,
            "lag": self.lag,
            "lag_seconds": round(self.lag_seconds(), 3),
            "failures": self.failures,
            "consecutive_failures": self.consecutive_failures,
            "last_error": self.last_error,
            "rejected": self.num_rejected,
            "last_rejected": [r._asdict() for r in list(self.rejected)[-5:]],
        }

    def health(self, max_lag_s: float) -> Check:
        """Not ok while writes fail, or once a frame has waited longer than `max_lag_s`."""
        status, waited = self.status(), self.lag_seconds()
        if self.consecutive_failures:
            return Check(
                False,
                f"writes failing ({self.consecutive_failures} in a row, {self.lag} frames kept "
                f"for retry, the oldest for {waited:.0f} s): {self.last_error}",
                status,
            )
        if waited <= max_lag_s:
            return Check(True, f"{self.lag} frames waiting ({waited:.1f} s)", status)
        error = f"; last error: {self.last_error}" if self.last_error else ""
        return Check(
            False,
            f"{self.lag} frames not yet in the database, the oldest for {waited:.0f} s "
            f"(over {max_lag_s:g} s){error}",
            status,
        )


async def _end_writer(writer: ProcessPoolExecutor, seconds: float) -> None:
    """Let the writer process finish what it was given and exit, off the loop; one stuck
    past `seconds` (a database that hangs) is killed: its open transaction never commits."""
    try:
        await asyncio.wait_for(asyncio.to_thread(writer.shutdown, True), seconds)
    except TimeoutError:
        log.error("the writer process did not exit within %g s: killed", seconds)
        for proc in list((getattr(writer, "_processes", None) or {}).values()):
            with contextlib.suppress(Exception):
                proc.kill()
