"""The sessions a dashboard knows: the recorded ones (newest first, filtered) and, before
them, live sessions that have no recording yet."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.db import queries
from app.live.hub import EventHub


async def list_sessions(
    db: sessionmaker[Session], hub: EventHub, q: str | None = None
) -> list[dict[str, Any]]:
    """Rows of `queries.list_sessions`, each with `live`, plus the live sessions that
    match `q` (id, name or source) and are not recorded yet."""

    def load() -> list[dict[str, Any]]:
        with db() as s:
            return [dict(row) for row in queries.list_sessions(s, q)]

    rows = await asyncio.to_thread(load)
    known = {r["id"] for r in rows}
    for row in rows:
        info = hub.sessions.get(row["id"])
        row["live"] = bool(info and info.live)
    needle = (q or "").lower()
    for sid, info in hub.sessions.items():
        label = f"{sid} {info.meta.get('name', '')} {info.meta.get('source', '')}".lower()
        if sid not in known and info.live and needle in label:
            rows.insert(
                0,
                {
                    "id": sid,
                    "name": info.meta.get("name", ""),
                    "live": True,
                    "source": info.meta.get("source", ""),
                    "steps": info.state.step + 1,
                    "requests": len(info.state.requests),
                    "started_at": info.meta.get("started_at", time.time()),
                },
            )
    return rows
