"""The recordings' size cap while serving (BATCHSCOPE_MAX_RECORDINGS_MB): every minute,
the oldest ended sessions go while the recordings store more than the cap."""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.orm import Session, sessionmaker

from app.db.retention import prune
from app.live.hub import EventHub

log = logging.getLogger("batchscope.retention")
EVERY_S = 60.0


async def enforce_cap(
    db: sessionmaker[Session], hub: EventHub, max_bytes: int, every_s: float = EVERY_S
) -> None:
    while True:
        live = frozenset(sid for sid, info in hub.sessions.items() if info.live)
        try:
            result = await asyncio.to_thread(prune, db, None, max_bytes, False, live)
        except Exception as exc:  # the database is away: try again next time
            log.warning("size cap: %s", exc)
        else:
            if result.sessions:
                log.warning(
                    "size cap %.0f MB: deleted %d oldest ended sessions (%.1f MB)",
                    max_bytes / 1e6,
                    len(result.sessions),
                    result.freed_bytes / 1e6,
                )
        await asyncio.sleep(every_s)
