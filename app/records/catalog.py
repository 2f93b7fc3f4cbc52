"""The sessions a dashboard knows: the recorded ones (newest first, filtered) and, before
them, live sessions that have no recording yet."""

from __future__ import annotations

import asyncio
import time
from typing import cast

from sqlalchemy.orm import Session, sessionmaker
from typing_extensions import TypedDict

from app.db import queries
from app.live.hub import EventHub
from protocol.wire import Knobs


class _ListedBase(TypedDict):
    id: str
    name: str
    source: str
    live: bool
    steps: int
    requests: int
    started_at: float


class ListedSession(_ListedBase, total=False):
    """A session of the list: a recording (queries.SessionRow's keys) or a live one not
    recorded yet (only the base keys); the sessions page adds its links."""

    runner: str
    model: str
    device: str
    simulated: bool
    config: Knobs
    ended_at: float | None
    end_reason: str | None
    last_seq: int
    href: str
    replay_href: str


async def list_sessions(
    db: sessionmaker[Session], hub: EventHub, q: str | None = None
) -> list[ListedSession]:
    """Rows of `queries.list_sessions`, each with `live`, plus the live sessions that
    match `q` (id, name or source) and are not recorded yet."""

    def load() -> list[ListedSession]:
        with db() as s:
            return [
                cast(ListedSession, {**row, "live": False}) for row in queries.list_sessions(s, q)
            ]

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
                    "steps": info.fold.step + 1,
                    "requests": len(info.fold.requests),
                    "started_at": float(info.meta.get("started_at", time.time())),
                },
            )
    return rows
