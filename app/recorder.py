"""Recorder: one more hub listener. Frames are buffered on the event loop (a list append)
and written in batches off the loop: by a writer process when the database is a file or a
server (so writes do not compete with the engine thread for the GIL), else by a worker
thread. Neither the engine thread nor the loop waits on the database. Nothing is dropped:
a failed write is retried, and `lag` says how many frames are waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.db.migrate import is_memory_url
from app.db.writer_process import start_writer, write_texts
from app.db.writes import write_batch
from app.hub import EventHub

log = logging.getLogger("batchscope.recorder")

CHECKPOINT_EVERY = 500
CHECKPOINT_COST_FACTOR = 10.0
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
        if database_url is not None and not is_memory_url(database_url):
            self._writer = start_writer(database_url)
        self.checkpoint_every = checkpoint_every
        self.flush_interval = flush_interval
        self.pending: list[tuple[str, str, int, dict[str, Any], str]] = []
        self.checkpoints: list[tuple[str, int, int, str]] = []
        self.written = 0
        self.failures = 0
        self.last_error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._last_checkpoint: dict[str, tuple[int, float]] = {}
        self._lock = asyncio.Lock()
        self._stopping = False
        self._checkpoint_cost = 0.0
        self._wake = asyncio.Event()
        hub.add_listener(self.on_frame)

    @property
    def lag(self) -> int:
        """Frames received but not yet in the database."""
        return len(self.pending)

    def on_frame(
        self, session: str, frame_type: str, seq: int, data: dict[str, Any], text: str
    ) -> None:
        if self.hub.is_relayed(session):
            return  # its origin process records it
        self.pending.append((session, frame_type, seq, data, text))
        last_seq, last_t = self._last_checkpoint.get(session, (0, 0.0))
        if seq - last_seq >= self.checkpoint_every and (
            time.monotonic() - last_t >= CHECKPOINT_COST_FACTOR * self._checkpoint_cost
        ):
            # A checkpoint serialises the whole folded state on the loop; with a huge
            # state they are spaced out so they never take more than ~1/10 of the loop.
            started = time.monotonic()
            state = self.hub.sessions[session].state
            self.checkpoints.append(
                (session, seq, max(state.step, 0), json.dumps(state.to_checkpoint()))
            )
            self._checkpoint_cost = time.monotonic() - started
            self._last_checkpoint[session] = (seq, started)
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
        if not self.pending and not self.checkpoints:
            return
        batch, self.pending = self.pending, []
        checkpoints, self.checkpoints = self.checkpoints, []
        try:
            if self._writer is not None:
                texts = [(s, t, q, text) for s, t, q, _data, text in batch]
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(self._writer, write_texts, texts, checkpoints)
            else:
                await asyncio.to_thread(self._write, batch, checkpoints)
            self.written += len(batch)
        except Exception as exc:  # keep the frames and retry next time
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning(
                "recording write failed (%s frames kept for retry): %s", len(batch), self.last_error
            )
            self.pending[:0] = batch
            self.checkpoints[:0] = checkpoints
            await asyncio.sleep(min(5.0, 0.2 * self.failures))

    def _write(
        self,
        batch: list[tuple[str, str, int, dict[str, Any], str]],
        checkpoints: list[tuple[str, int, int, str]],
    ) -> None:
        started = time.perf_counter()
        with self.sessions.begin() as db:
            write_batch(db, batch, checkpoints)
        log.debug("wrote %d frames in %.1f ms", len(batch), (time.perf_counter() - started) * 1e3)

    def status(self) -> dict[str, Any]:
        return {
            "written": self.written,
            "lag": self.lag,
            "failures": self.failures,
            "last_error": self.last_error,
        }
