"""A session belongs to the producer that created it. Creating one over /ws/ingest issues a
resume key (its hash is stored); resuming needs that key. Sessions that no producer
created (the local engine's, re-runs, imports, relayed ones) can never be claimed."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import secrets
from typing import NamedTuple

from sqlalchemy.orm import Session, sessionmaker

from app.db import owners, queries
from app.errors import NotFound
from app.frames.fold import SessionState
from app.live.hub import EventHub

SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
"""What a producer may name its session: printable, no spaces, at most 128 characters."""


class Claim(NamedTuple):
    session: str
    key: str | None
    """A new session's resume key (sent once, in the welcome); None when resuming."""
    restored: SessionState | None
    """The recorded state of a session this dashboard no longer holds in memory."""


class Refused(Exception):
    """The announce may not have this session."""


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _matches(key_hash: str | None, key: object) -> bool:
    return (
        key_hash is not None
        and isinstance(key, str)
        and hmac.compare_digest(key_hash, hash_key(key))
    )


def restore_state(db: sessionmaker[Session], session: str) -> SessionState | None:
    """A session recorded here before (a restart): its state at its last recorded seq."""
    with db() as s:
        try:
            meta = queries.get_session(s, session)
        except NotFound:
            return None
        return queries.state_at_seq(s, session, meta["last_seq"])


async def claim(
    db: sessionmaker[Session],
    hub: EventHub,
    owned: dict[str, str],
    requested: object,
    key: object,
    node: str,
    new_id: str,
) -> Claim:
    """The session an announce gets. `owned`: key hashes of sessions created over ingest
    (this process's memory of the table). Raises Refused."""
    if requested is None:
        requested = new_id
    if not isinstance(requested, str) or not SESSION_ID.fullmatch(requested):
        raise Refused("session: 1-128 letters, digits and . _ : - (or null for a new one)")
    if requested in hub.sessions:
        if not _matches(owned.get(requested), key):
            raise Refused(f"session {requested} belongs to another producer")
        return Claim(requested, None, None)
    recorded, key_hash = await asyncio.to_thread(owners.owner_of, db, requested)
    if recorded or key_hash is not None:
        if not _matches(key_hash, key):
            raise Refused(f"session {requested} belongs to another producer")
        assert key_hash is not None
        owned[requested] = key_hash
        return Claim(requested, None, await asyncio.to_thread(restore_state, db, requested))
    new_key = secrets.token_urlsafe(24)
    if not await asyncio.to_thread(owners.add_owner, db, requested, hash_key(new_key), node):
        raise Refused(f"session {requested} belongs to another producer")
    owned[requested] = hash_key(new_key)
    return Claim(requested, new_key, None)
