"""Retention: delete ended recordings older than a cutoff, and the oldest ended ones while
the recordings' stored bytes exceed a cap. Sessions still open are never touched."""

from __future__ import annotations

import time
from typing import NamedTuple

from sqlalchemy import Engine, delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db.models import (
    CheckpointRecord,
    DoneCountsRecord,
    EventRecord,
    FrameBlockRecord,
    IterationRecord,
    LiveRowsRecord,
    SessionOwnerRecord,
    SessionRecord,
)
from app.db.queries import delete_session
from app.db.session import write_transaction


class Pruned(NamedTuple):
    sessions: list[str]
    freed_bytes: int
    stored_bytes: int
    """What the recordings still store afterwards."""


def stored_bytes(db: Session) -> dict[str, int]:
    """Bytes each session's frames and checkpoints take (the same measure on any backend)."""
    sizes: dict[str, int] = {}
    for model, column in (
        (IterationRecord, IterationRecord.frame),
        (EventRecord, EventRecord.frame),
        (CheckpointRecord, CheckpointRecord.state),
        (LiveRowsRecord, LiveRowsRecord.state),
        (FrameBlockRecord, FrameBlockRecord.frames),
        (DoneCountsRecord, DoneCountsRecord.counts),
    ):
        rows = db.execute(
            select(model.session_id, func.sum(func.length(column))).group_by(model.session_id)
        )
        for session, size in rows:
            sizes[session] = sizes.get(session, 0) + int(size or 0)
    return sizes


def prune(
    db: sessionmaker[Session],
    older_than_s: float | None = None,
    max_bytes: int | None = None,
    dry_run: bool = False,
    keep: frozenset[str] = frozenset(),
) -> Pruned:
    """Delete ended sessions started more than `older_than_s` ago, then the oldest ended
    ones until what is stored is at most `max_bytes`. `keep`: never these (live here)."""
    with write_transaction(db) as s:
        sizes = stored_bytes(s)
        ended = s.execute(
            select(SessionRecord.id, SessionRecord.started_at)
            .where(SessionRecord.ended_at.is_not(None))
            .order_by(SessionRecord.started_at)
        ).all()
        total = sum(sizes.values())
        doomed: list[str] = []
        cutoff = None if older_than_s is None else time.time() - older_than_s
        for sid, started in ended:
            too_old = cutoff is not None and started < cutoff
            too_big = max_bytes is not None and total > max_bytes
            if sid not in keep and (too_old or too_big):
                doomed.append(sid)
                total -= sizes.get(sid, 0)
        freed = sum(sizes.get(sid, 0) for sid in doomed)
        if not dry_run:
            for sid in doomed:
                delete_session(s, sid)
                s.execute(delete(SessionOwnerRecord).where(SessionOwnerRecord.session_id == sid))
    return Pruned(doomed, freed, total)


def compact(engine: Engine) -> bool:
    """Give freed space back to the file system (SQLite VACUUM; PostgreSQL's autovacuum
    reuses it). False if the database was busy."""
    if engine.dialect.name != "sqlite":
        return True
    raw = engine.raw_connection()  # outside any transaction, as VACUUM needs
    try:
        raw.cursor().execute("VACUUM")
        return True
    except Exception:
        return False
    finally:
        raw.close()
