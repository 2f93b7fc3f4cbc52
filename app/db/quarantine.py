"""Write a batch so that one bad frame can never block the others: the batch goes in one
transaction; if that fails for a reason the data causes (a constraint, a value the column
cannot hold, a frame the writer cannot read), the failing frames are found by bisection
under SAVEPOINTs and set aside (quarantined) with their reason, and the rest is written.
A failure of the database itself (connection lost, locked) is not the data's fault: it is
raised, and the whole batch is retried later.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session

from app.db.writes import Frame


class Rejected(NamedTuple):
    """A frame the database would not take, and why."""

    session: str
    seq: int
    reason: str


def is_transient(exc: BaseException) -> bool:
    """The database is away or busy (retry everything later), not refusing this data."""
    if isinstance(exc, (OperationalError, InterfaceError)):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def describe(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


Write = Callable[[Session, list[Frame]], None]


def write_isolated(db: Session, frames: list[Frame], write: Write) -> list[Rejected]:
    """Write `frames` with `write` inside the caller's transaction; returns the frames set
    aside. Raises only transient errors."""
    if not frames:
        return []
    try:
        with db.begin_nested():
            write(db, frames)
        return []
    except Exception as exc:
        if is_transient(exc):
            raise
        if len(frames) == 1:
            f = frames[0]
            return [Rejected(f.session, f.seq, describe(exc))]
    mid = len(frames) // 2
    return write_isolated(db, frames[:mid], write) + write_isolated(db, frames[mid:], write)
