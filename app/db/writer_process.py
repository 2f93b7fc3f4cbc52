"""The recorder's writer: writes frame batches and folds them into each session's state to
store periodic checkpoints. It runs in a separate process when the database is a file or
a server (database writes, JSON parsing and checkpoint serialisation then use another
core, never the engine's GIL), or in a thread for a private (`sqlite://`) database.
Frames travel as their encoded text only.

A frame the database refuses is set aside alone (app.db.quarantine) and reported back;
the process ignores the terminal's SIGINT and a group SIGTERM (the web process drains it
first, then ends it), and exits by itself if the web process dies.
"""

from __future__ import annotations

import json
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

from app.db.checkpoint_codec import CheckpointClock, encode_checkpoint
from app.db.live_rows import LiveRowsTaker, encode_live_rows
from app.db.quarantine import Rejected, describe, is_transient, write_isolated
from app.db.queries import state_at_seq
from app.db.session import make_engine, make_sessionmaker
from app.db.writes import (
    ENDED_MARKS,
    Checkpoint,
    Frame,
    write_batch,
    write_live_rows,
    write_segments,
)
from app.frames.fold import SessionState
from protocol.codes import FrameType

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
    """Owns a fold of every session it writes, to checkpoint it every N frames."""

    def __init__(
        self, sessions: sessionmaker[Session], checkpoint_every: int, recorder: str | None = None
    ) -> None:
        """`recorder`: `host:pid` of the web process, kept on the rows of its sessions."""
        self.sessions = sessions
        self.recorder = recorder
        self.checkpoint_every = checkpoint_every
        self.states: dict[str, SessionState] = {}
        self.clocks: dict[str, CheckpointClock] = {}
        self.live: dict[str, LiveRowsTaker] = {}
        """Live rows of the sessions folded here from their first frame (app.db.live_rows)."""

    def _state(self, db: Session, session: str, seq: int) -> SessionState:
        state = self.states.get(session)
        if state is None:
            # A session this writer has not seen: new, or continuing a recording (a node
            # resuming after a restart). Pick up from what the database already holds.
            if seq > 1:
                state = state_at_seq(db, session, seq - 1)
                self.live.pop(session, None)  # its earlier marks are not seen here
            else:
                state = SessionState(session)
                self.live[session] = LiveRowsTaker()
            self.states[session] = state
            self.clocks[session] = CheckpointClock(self.checkpoint_every)
        return state

    def write(self, batch: list[TextFrame]) -> WriteResult:
        frames: list[Frame] = []
        rejected: list[Rejected] = []
        for session, frame_type, seq, text in batch:
            try:
                data = json.loads(text)["data"]
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
                self._checkpoint(db, frames)
        except Exception:
            # Nothing of this batch was stored: folds that went past it start over.
            for session in {f.session for f in frames}:
                self.states.pop(session, None)
                self.live.pop(session, None)
            raise
        return WriteResult(len(frames), rejected)

    def _write_frames(self, db: Session, frames: list[Frame]) -> None:
        write_batch(db, frames, [], self.recorder)
        db.flush()

    def _checkpoint(self, db: Session, frames: list[Frame]) -> None:
        checkpoints: list[Checkpoint] = []
        live_rows: list[Checkpoint] = []
        ended: dict[tuple[str, str], list[list[object]]] = {}
        for session, frame_type, seq, data, text in frames:
            try:
                state = self._state(db, session, seq)
                if seq <= state.seq:
                    continue
                taker = self.live.get(session)
                if taker is not None:
                    rows = taker.before(state, frame_type, data)
                    if rows is not None:
                        encoded = encode_live_rows(rows)
                        live_rows.append(Checkpoint(session, rows["seq"], rows["step"], encoded))
                        taker.taken(len(encoded))
                state.apply(frame_type, seq, data)
                if frame_type == FrameType.REQUEST and data.get("kind") in ENDED_MARKS:
                    row = state.requests.get(data["req"])
                    if row is not None:
                        ended[(session, row["req"])] = [list(x) for x in row["segments"]]
                if taker is not None:
                    taker.after(frame_type, data, text)
            except Exception as exc:
                if is_transient(exc):
                    raise
                # A frame the fold cannot read: checkpoints of this session resume from
                # the database's own fold next time (the frame itself is stored).
                log.warning("checkpoint fold of %s at seq %s: %s", session, seq, describe(exc))
                self.states.pop(session, None)
                self.live.pop(session, None)
                continue
            clock = self.clocks[session]
            clock.add(text)
            if clock.due():
                encoded = encode_checkpoint(state.to_checkpoint())
                checkpoints.append(Checkpoint(session, seq, max(state.step, 0), encoded))
                clock.taken(len(encoded))
        if checkpoints:
            write_batch(db, [], checkpoints)
        if live_rows:
            write_live_rows(db, live_rows)
        if ended:
            write_segments(db, ended)


_writer: Writer | None = None


def _watch_parent(parent: int) -> None:
    """The web process died without ending us (SIGKILL): nothing will come; exit."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def _init(database_url: str, checkpoint_every: int, recorder: str) -> None:
    global _writer
    # Ctrl-C in a terminal (and systemd's stop) signal the whole process group: the web
    # process then drains what is pending into this process, and ends it itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    _writer = Writer(
        make_sessionmaker(make_engine(database_url, writer=True)), checkpoint_every, recorder
    )


def write_texts(batch: list[TextFrame]) -> WriteResult:
    """In the writer process: write one batch (one transaction)."""
    assert _writer is not None, "writer process not initialised"
    return _writer.write(batch)


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
