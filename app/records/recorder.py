"""Recorder: one more hub listener. Frames are buffered on the event loop (a list append)
and written in batches off the loop: by a writer process when the database is a file or a
server (so writes, and the fold that makes periodic checkpoints, never compete with the
engine thread for the GIL), else by a worker thread. Neither the engine thread nor the
loop waits on the database. Nothing is dropped: a failed write is retried, and `lag` says
how many frames are waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.db.migrate import is_memory_url
from app.db.writer_process import TextFrame, Writer, start_writer, write_texts
from app.live.health import Check
from app.live.hub import EventHub

log = logging.getLogger("batchscope.recorder")

CHECKPOINT_EVERY = 250
"""Frames between checkpoints: a seek folds at most this many after the nearest one."""
FLUSH_INTERVAL_S = 0.5


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
        self._writer: ProcessPoolExecutor | None = None
        self._local = Writer(sessions, checkpoint_every)
        if database_url is not None and not is_memory_url(database_url):
            self._writer = start_writer(database_url, checkpoint_every)
        self.checkpoint_every = checkpoint_every
        self.flush_interval = flush_interval
        self.pending: list[TextFrame] = []
        self.pending_since: float | None = None
        """Monotonic time the oldest pending frame arrived."""
        self.writing = 0
        """Frames of the batch being written now."""
        self._writing_since: float | None = None
        self.written = 0
        self.failures = 0
        self.last_error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._stopping = False
        self._wake = asyncio.Event()
        hub.add_listener(self.on_frame)

    @property
    def lag(self) -> int:
        """Frames received but not yet in the database (the batch being written included)."""
        return len(self.pending) + self.writing

    def lag_seconds(self) -> float:
        """How long the oldest frame not yet in the database has waited (0: none)."""
        since = [t for t in (self._writing_since, self.pending_since) if t is not None]
        return time.monotonic() - min(since) if since else 0.0

    def on_frame(
        self, session: str, frame_type: str, seq: int, data: dict[str, Any], text: str
    ) -> None:
        if self.hub.is_relayed(session):
            return  # its origin process records it
        del data  # the writer re-parses the text, off this loop (in its own process)
        if not self.pending:
            self.pending_since = time.monotonic()
        self.pending.append(TextFrame(session, frame_type, seq, text))
        if len(self.pending) >= 5000:
            self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="recorder")

    async def stop(self) -> None:
        """Stop the periodic flusher without interrupting a write in progress (its thread
        would go on writing), then write everything still pending."""
        if self._task is not None:
            self._stopping = True
            self._wake.set()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        async with self._lock:
            await self._flush_locked()
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None

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
        if not self.pending:
            return
        batch, self.pending = self.pending, []
        since, self.pending_since = self.pending_since, None
        self.writing, self._writing_since = len(batch), since
        try:
            if self._writer is not None:
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(self._writer, write_texts, batch)
            else:
                await asyncio.to_thread(self._local.write, batch)
            self.written += len(batch)
        except Exception as exc:  # keep the frames and retry next time
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning(
                "recording write failed (%s frames kept for retry): %s", len(batch), self.last_error
            )
            self.pending[:0] = batch
            self.pending_since = since
            await asyncio.sleep(min(5.0, 0.2 * self.failures))
        finally:
            self.writing, self._writing_since = 0, None

    def status(self) -> dict[str, Any]:
        return {
            "written": self.written,
            "lag": self.lag,
            "lag_seconds": round(self.lag_seconds(), 3),
            "failures": self.failures,
            "last_error": self.last_error,
        }

    def health(self, max_lag_s: float) -> Check:
        """Not ok once a frame has waited longer than `max_lag_s` for the database."""
        status, waited = self.status(), self.lag_seconds()
        if waited <= max_lag_s:
            return Check(True, f"{self.lag} frames waiting ({waited:.1f} s)", status)
        error = f"; last error: {self.last_error}" if self.last_error else ""
        return Check(
            False,
            f"{self.lag} frames not yet in the database, the oldest for {waited:.0f} s "
            f"(over {max_lag_s:g} s){error}",
            status,
        )
