"""The recorder's writer: writes frame batches and folds them into each session's state to
store periodic checkpoints, and keeps PostgreSQL's planner statistics of the tables it
grows current (app.db.planner_stats). It runs in a separate process when the database is
a file or a server (database writes, JSON parsing and checkpoint serialisation then use
another core, never the engine's GIL), or in a thread for a private (`sqlite://`)
database.
Frames travel as their encoded text only.

A frame the database refuses is set aside alone (app.db.quarantine) and reported back;
the process ignores the terminal's SIGINT and a group SIGTERM (the web process drains it
first, then ends it), and exits by itself if the web process dies.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import NamedTuple

from sqlalchemy.orm import Session, sessionmaker

from app import fast_json
from app.db import done_counts
from app.db.live_rows import LiveRowsTaker
from app.db.models import SessionRecord
from app.db.planner_stats import PlannerStats
from app.db.quarantine import Rejected, describe, is_transient, write_isolated
from app.db.queries import state_at_seq
from app.db.recording_fold import RecordingFold, Stored
from app.db.session import make_engine, make_sessionmaker
from app.db.writes import Frame, write_batch, write_live_rows, write_segments
from app.frames.fold import SessionState
from engine.gc_clock import GcClock
from protocol.codes import FrameType, SessionEvent

log = logging.getLogger("batchscope.writer")


class TextFrame(NamedTuple):
    """A frame on its way to the writer: its encoded text only (parsed over there)."""

    session: str
    type: str
    seq: int
    text: str


class WriteResult(NamedTuple):
    written: int
    rejected: list[Rejected]
    """Frames set aside: the database would not take them (the rest was written)."""


class Writer:
    """Owns a fold of every session it writes, to checkpoint it every N frames, and its
    done counts, to store them as they grow (app.db.done_counts)."""

    def __init__(
        self, sessions: sessionmaker[Session], checkpoint_every: int, recorder: str | None = None
    ) -> None:
        """`recorder`: `host:pid` of the web process, kept on the rows of its sessions."""
        self.sessions = sessions
        self.recorder = recorder
        self.checkpoint_every = checkpoint_every
        self.folds: dict[str, RecordingFold] = {}
        self.done: dict[str, tuple[done_counts.DoneCounts, int]] = {}
        """session -> its done counts, and how many rows they held when last stored."""
        self.planner = PlannerStats(sessions)

    def _fold(self, db: Session, session: str, seq: int) -> RecordingFold:
        fold = self.folds.get(session)
        if fold is None:
            # A session this writer has not seen: new, or continuing a recording (a node
            # resuming after a restart). Pick up from what the database already holds
            # (its earlier marks unseen here: no live rows).
            if seq > 1:
                fold = RecordingFold(
                    state_at_seq(db, session, seq - 1), self.checkpoint_every, None
                )
            else:
                fold = RecordingFold(SessionState(session), self.checkpoint_every, LiveRowsTaker())
            self.folds[session] = fold
        return fold

    def write(self, batch: list[TextFrame]) -> WriteResult:
        frames: list[Frame] = []
        rejected: list[Rejected] = []
        for session, frame_type, seq, text in batch:
            try:
                data = fast_json.loads(text)["data"]
                if not isinstance(data, dict):
                    raise ValueError("data is not an object")
            except (ValueError, KeyError, TypeError) as exc:
                rejected.append(Rejected(session, seq, f"unreadable frame: {exc}"[:300]))
                continue
            frames.append(Frame(session, frame_type, seq, data, text))
        try:
            with self.sessions.begin() as db:
                refused = write_isolated(db, frames, self._write_frames)
                if refused:
                    keys = {(r.session, r.seq) for r in refused}
                    frames = [f for f in frames if (f.session, f.seq) not in keys]
                    rejected += refused
                checkpointed = self._checkpoint(db, frames)
        except Exception:
            # Nothing of this batch was stored: folds that went past it start over.
            for session in {f.session for f in frames}:
                self.folds.pop(session, None)
            raise
        closed = _closed(frames)
        for session in sorted(checkpointed | set(closed)):
            self._count_done(session, session in closed)
        self.planner.tick(now=bool(closed))  # a recording that ends is replayed next
        return WriteResult(len(frames), rejected)

    def _count_done(self, session: str, closed: bool) -> None:
        """Count the session's done rows on to its last final step (at a checkpoint: the
        new rows only) and store the counts a replay's pages start from
        (app.db.done_counts) once enough more are done, and when it ends."""
        try:
            with self.sessions() as db:
                rec = db.get(SessionRecord, session)
                if rec is None:
                    return
                held = self.done.get(session)
                if held is None:  # a new session, or a writer restarted: the stored ones
                    kept = done_counts.stored(db, session)
                    held = (kept, kept.rows()) if kept else (done_counts.read(db, session, -1), 0)
                counts, stored = held
                counts.extend(db, done_counts.final_step(rec.num_steps))
                done = counts.rows()
                if closed or done - stored >= max(done_counts.STORE_ROWS, stored // 16):
                    done_counts.store(db, counts, rec.last_seq)
                    db.commit()
                    held = (counts, done)
                if closed:
                    self.done.pop(session, None)
                else:
                    self.done[session] = held
        except Exception:  # a replay reads them from the requests instead
            self.done.pop(session, None)
            log.warning("done counts of %s not stored", session, exc_info=True)

    def _write_frames(self, db: Session, frames: list[Frame]) -> None:
        write_batch(db, frames, [], self.recorder)
        db.flush()

    def _checkpoint(self, db: Session, frames: list[Frame]) -> set[str]:
        """Fold the frames; store the checkpoints, live rows and segments they give.
        Returns the sessions checkpointed."""
        out = Stored()
        for session, frame_type, seq, data, text in frames:
            try:
                fold = self._fold(db, session, seq)
                if seq <= fold.state.seq:
                    continue
                fold.take(frame_type, seq, data, text, out)
            except Exception as exc:
                if is_transient(exc):
                    raise
                # A frame the fold cannot read: checkpoints of this session resume from
                # the database's own fold next time (the frame itself is stored).
                log.warning("checkpoint fold of %s at seq %s: %s", session, seq, describe(exc))
                self.folds.pop(session, None)
        if out.checkpoints:
            write_batch(db, [], out.checkpoints)
        if out.live_rows:
            write_live_rows(db, out.live_rows)
        if out.ended:
            write_segments(db, out.ended)
        return {c.session for c in out.checkpoints}


def _closed(frames: list[Frame]) -> list[str]:
    """The sessions a frame of the batch closed."""
    return [
        f.session
        for f in frames
        if f.type == FrameType.SESSION and f.data.get("event") == SessionEvent.CLOSED
    ]


_writer: Writer | None = None
_gc: GcClock | None = None


def _watch_parent(parent: int) -> None:
    """The web process died without ending us (SIGKILL): nothing will come; exit."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def _init(database_url: str, checkpoint_every: int, recorder: str) -> None:
    global _writer, _gc
    # Ctrl-C in a terminal (and systemd's stop) signal the whole process group: the web
    # process then drains what is pending into this process, and ends it itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    _gc = GcClock()  # this process's collections (engine.gc_clock)
    _writer = Writer(
        make_sessionmaker(make_engine(database_url, writer=True)), checkpoint_every, recorder
    )


def write_texts(batch: list[TextFrame]) -> WriteResult:
    """In the writer process: write one batch (one transaction)."""
    assert _writer is not None and _gc is not None, "writer process not initialised"
    try:
        return _writer.write(batch)
    finally:
        _gc.tick()


def recorder_id() -> str:
    """This server process, as the sessions it records name it."""
    return f"{socket.gethostname()}:{os.getpid()}"[:128]


def start_writer(database_url: str, checkpoint_every: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init,
        initargs=(database_url, checkpoint_every, recorder_id()),
    )
