"""LabWorker: runs the lab's sweeps one at a time on a background thread, each sweep's
points in spawn worker processes (engine.sweep_pool.run_sweep), never on the event loop.
Each point is stored the moment it finishes; the page polls the store for progress.

Stopping (server shutdown) or cancelling lets the running points finish and keeps them.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException
from fastapi.requests import HTTPConnection
from sqlalchemy.orm import Session, sessionmaker

from app.lab import store
from app.lab.spec import SweepSpec
from engine.faults import stopped_text
from engine.sweep import PointResult
from engine.sweep_pool import run_sweep

log = logging.getLogger("batchscope.lab")


@dataclass
class _Job:
    sweep_id: str
    spec: SweepSpec
    num_points: int
    cancel: threading.Event = field(default_factory=threading.Event)


class LabWorker:
    def __init__(self, db: sessionmaker[Session], workers: int | None = None) -> None:
        self.db = db
        self.workers = workers
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._jobs: dict[str, _Job] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.current: str | None = None

    def start(self) -> None:
        """Mark what a previous server left unfinished, then wait for sweeps."""
        store.interrupt_unfinished(self.db)
        self._thread = threading.Thread(target=self._loop, name="lab-sweeps", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 60.0) -> None:
        """Let the running points finish (kept), drop the queue, join the thread."""
        self._stop.set()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("the running sweep did not stop within %g s: cut off", timeout)
        store.interrupt_unfinished(self.db)

    def submit(self, spec: SweepSpec, num_points: int) -> str:
        """Store the sweep (queued) and queue it; `spec.points()` (which gave
        `num_points`) must have passed."""
        sweep_id = store.create_sweep(self.db, spec, num_points)
        job = _Job(sweep_id, spec, num_points)
        self._jobs[sweep_id] = job
        self._queue.put(job)
        return sweep_id

    def cancel(self, sweep_id: str) -> bool:
        """Stop a queued or running sweep (its finished points stay). False: not ours."""
        job = self._jobs.get(sweep_id)
        if job is None:
            return False
        job.cancel.set()
        return True

    def status(self) -> dict[str, object]:
        return {"running": self.current, "queued": max(0, self._queue.qsize())}

    # ------------------------------------------------------------ the thread
    def _loop(self) -> None:
        while not self._stop.is_set():
            job = self._queue.get()
            if job is None:
                return
            try:
                self._run(job)
            except Exception as exc:  # a broken sweep must not end the worker
                log.exception("sweep %s failed", job.sweep_id)
                store.set_status(self.db, job.sweep_id, "failed", f"{type(exc).__name__}: {exc}")
            finally:
                self._jobs.pop(job.sweep_id, None)
                self.current = None

    def _run(self, job: _Job) -> None:
        if job.cancel.is_set():
            store.set_status(self.db, job.sweep_id, "cancelled")
            return
        self.current = job.sweep_id
        store.set_status(self.db, job.sweep_id, "running")
        spec = job.spec

        def on_result(res: PointResult, _done: int, _total: int) -> None:
            store.add_point(self.db, job.sweep_id, res)

        def should_stop() -> bool:
            return self._stop.is_set() or job.cancel.is_set()

        results = run_sweep(
            spec.base,
            spec.knobs,
            spec.repeat,
            spec.runner,
            spec.cost_model,
            workers=self.workers,
            on_result=on_result,
            should_stop=should_stop,
        )
        stopped = [r for r in results if r.stopped and not r.error]
        if len(results) == job.num_points and stopped:
            # Every point ran, but some were cut short: never shown as a plain "done".
            store.set_status(
                self.db,
                job.sweep_id,
                "incomplete",
                f"{len(stopped)} run(s) cut short, e.g. run {stopped[0].point.index}: "
                f"{stopped_text(stopped[0].stopped or {})}",
            )
        elif len(results) == job.num_points:
            store.set_status(self.db, job.sweep_id, "done")
        elif job.cancel.is_set():
            store.set_status(self.db, job.sweep_id, "cancelled")
        else:
            store.set_status(self.db, job.sweep_id, "interrupted")


async def lab_worker(conn: HTTPConnection) -> LabWorker:
    """FastAPI dependency: the app's lab worker (started by the lifespan)."""
    worker: LabWorker | None = getattr(conn.app.state, "lab", None)
    if worker is None:
        raise HTTPException(503, "the lab is not running yet")
    return worker


LabDep = Annotated[LabWorker, Depends(lab_worker)]
