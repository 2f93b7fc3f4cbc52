"""The recorder's writer as a separate process: database writes (SQLAlchemy, the driver,
JSON parsing of the frames) then use another core instead of competing with the engine
thread for this process's GIL. Frames travel as their encoded text only.
"""

from __future__ import annotations

import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

from sqlalchemy.orm import Session, sessionmaker

from app.db.session import make_engine, make_sessionmaker
from app.db.writes import write_batch

TextFrame = tuple[str, str, int, str]
_sessions: sessionmaker[Session] | None = None


def _init(database_url: str) -> None:
    global _sessions
    _sessions = make_sessionmaker(make_engine(database_url))


def write_texts(batch: list[TextFrame], checkpoints: list[tuple[str, int, int, str]]) -> int:
    """In the worker: parse each frame once, write the batch in one transaction."""
    assert _sessions is not None, "writer process not initialised"
    frames = [(s, t, q, json.loads(text)["data"], text) for s, t, q, text in batch]
    with _sessions.begin() as db:
        write_batch(db, frames, checkpoints)
    return len(frames)


def start_writer(database_url: str) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init,
        initargs=(database_url,),
    )
