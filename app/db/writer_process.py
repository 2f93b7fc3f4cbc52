"""The recorder's writer: writes frame batches and folds them into each session's state to
store periodic checkpoints. It runs in a separate process when the database is a file or
a server (database writes, JSON parsing and checkpoint serialisation then use another
core, never the engine's GIL), or in a thread for an in-memory database. Frames travel as
their encoded text only.
"""

from __future__ import annotations

import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import NamedTuple

from sqlalchemy.orm import Session, sessionmaker

from app.db.checkpoint_codec import encode_checkpoint
from app.db.queries import state_at_seq
from app.db.session import make_engine, make_sessionmaker
from app.db.writes import Checkpoint, Frame, write_batch
from app.protocol.state import SessionState


class TextFrame(NamedTuple):
    """A frame on its way to the writer: its encoded text only (parsed over there)."""

    session: str
    type: str
    seq: int
    text: str


class Writer:
    """Owns a fold of every session it writes, to checkpoint it every N frames."""

    def __init__(self, sessions: sessionmaker[Session], checkpoint_every: int) -> None:
        self.sessions = sessions
        self.checkpoint_every = checkpoint_every
        self.states: dict[str, SessionState] = {}
        self.last_checkpoint: dict[str, int] = {}

    def _state(self, db: Session, session: str, seq: int) -> SessionState:
        state = self.states.get(session)
        if state is None:
            # A session this writer has not seen: new, or continuing a recording (a node
            # resuming after a restart). Pick up from what the database already holds.
            state = state_at_seq(db, session, seq - 1) if seq > 1 else SessionState(session)
            self.states[session] = state
            self.last_checkpoint[session] = state.seq
        return state

    def write(self, batch: list[TextFrame]) -> int:
        frames = [Frame(s, t, q, json.loads(text)["data"], text) for s, t, q, text in batch]
        with self.sessions.begin() as db:
            write_batch(db, frames, [])
            checkpoints: list[Checkpoint] = []
            for session, frame_type, seq, data, _text in frames:
                state = self._state(db, session, seq)
                if seq <= state.seq:
                    continue
                state.apply(frame_type, seq, data)
                if seq - self.last_checkpoint[session] >= self.checkpoint_every:
                    encoded = encode_checkpoint(state.to_checkpoint())
                    checkpoints.append(Checkpoint(session, seq, max(state.step, 0), encoded))
                    self.last_checkpoint[session] = seq
            if checkpoints:
                write_batch(db, [], checkpoints)
        return len(frames)


_writer: Writer | None = None


def _init(database_url: str, checkpoint_every: int) -> None:
    global _writer
    _writer = Writer(make_sessionmaker(make_engine(database_url)), checkpoint_every)


def write_texts(batch: list[TextFrame]) -> int:
    """In the writer process: write one batch (one transaction)."""
    assert _writer is not None, "writer process not initialised"
    return _writer.write(batch)


def start_writer(database_url: str, checkpoint_every: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init,
        initargs=(database_url, checkpoint_every),
    )
