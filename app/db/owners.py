"""Who may resume a session over /ws/ingest: the producer that created it (by the hash of
the key it was issued). Read and written off the event loop."""

from __future__ import annotations

import time

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.db.models import SessionOwnerRecord, SessionRecord


def owner_of(db: sessionmaker[Session], session: str) -> tuple[bool, str | None]:
    """(is the session recorded, the key hash of its owner or None)."""
    with db() as s:
        owner = s.get(SessionOwnerRecord, session)
        recorded = s.get(SessionRecord, session) is not None
        return recorded, owner.key_hash if owner else None


def add_owner(db: sessionmaker[Session], session: str, key_hash: str, node: str) -> bool:
    """Record the creator of a new session; False if someone else got there first."""
    try:
        with db.begin() as s:
            s.add(
                SessionOwnerRecord(
                    session_id=session, key_hash=key_hash, node=node[:100], created_at=time.time()
                )
            )
        return True
    except IntegrityError:
        return False
