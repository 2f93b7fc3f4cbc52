"""End marks a server writes for sessions it can no longer record: at an orderly shutdown
(`shutdown`), and at start for sessions a server that died left open (`orphaned`), with
what their recording covers."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from typing_extensions import TypedDict

from app.db.models import CheckpointRecord, SessionRecord
from app.db.session import write_transaction


class Orphan(TypedDict):
    session: str
    recorder: str | None
    steps: int
    last_seq: int
    checkpoint_step: int | None
    """The step of its last checkpoint (None: none was written)."""


def mark_ended(db: sessionmaker[Session], sessions: Iterable[str], reason: str) -> int:
    """Sessions among `sessions` still open get ended_at now; returns how many."""
    ids = list(sessions)
    if not ids:
        return 0
    now = time.time()
    with write_transaction(db) as s:
        rows = s.scalars(
            select(SessionRecord).where(SessionRecord.id.in_(ids), SessionRecord.ended_at.is_(None))
        ).all()
        for rec in rows:
            rec.ended_at, rec.end_reason = now, reason
        return len(rows)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_dead(recorder: str | None, host: str) -> bool:
    """Its recording process is known to be gone (same host, no such pid, not us)."""
    if not recorder:
        return True  # recorded before recorders were named: nothing can still own it
    rec_host, _, pid = recorder.rpartition(":")
    if rec_host != host or not pid.isdigit():
        return False  # another host's server may be recording it now
    return int(pid) != os.getpid() and not _pid_alive(int(pid))


def mark_orphans(db: sessionmaker[Session]) -> list[Orphan]:
    """Mark ended the open sessions whose recording server died; say what each covers."""
    host = socket.gethostname()
    now = time.time()
    found: list[Orphan] = []
    with write_transaction(db) as s:
        rows = s.scalars(select(SessionRecord).where(SessionRecord.ended_at.is_(None))).all()
        for rec in rows:
            if not _is_dead(rec.recorder, host):
                continue
            ckpt = s.scalar(
                select(func.max(CheckpointRecord.step)).where(CheckpointRecord.session_id == rec.id)
            )
            rec.ended_at, rec.end_reason = now, "orphaned"
            found.append(
                {
                    "session": rec.id,
                    "recorder": rec.recorder,
                    "steps": rec.num_steps,
                    "last_seq": rec.last_seq,
                    "checkpoint_step": ckpt,
                }
            )
    return found


def describe_orphan(o: Orphan) -> str:
    ckpt = (
        "no checkpoint"
        if o["checkpoint_step"] is None
        else (f"last checkpoint at step {o['checkpoint_step']}")
    )
    return (
        f"session {o['session']} was left open by a server that stopped without shutting "
        f"down ({o['recorder'] or 'unknown'}): marked ended; its recording covers steps "
        f"0-{max(o['steps'] - 1, 0)} (frames 1-{o['last_seq']}), {ckpt}"
    )
