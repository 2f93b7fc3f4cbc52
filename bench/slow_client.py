"""A viewer on a slow link, for the lag test and the fault bench: it reads /ws/live at a
fixed byte rate, answers pings as live.js does, and records how stale each iteration frame
was when it was read (now minus the server's publish time `ts`)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import websockets


@dataclass
class SlowView:
    staleness: list[tuple[float, float]] = field(default_factory=list)
    """(seconds since start, how old an iteration or snapshot was when read)."""
    gaps: int = 0
    snapshots: int = 0
    snapshot_bytes: list[int] = field(default_factory=list)
    bytes_read: int = 0


async def slow_viewer(ws_url: str, seconds: float, bytes_per_s: float) -> SlowView:
    view = SlowView()
    start = time.monotonic()
    async with websockets.connect(ws_url + "/ws/live", max_size=None, max_queue=1) as ws:
        await ws.send(json.dumps({"type": "hello", "session": None, "acks": True}))
        while time.monotonic() - start < seconds:
            try:
                text = await asyncio.wait_for(ws.recv(), 1.0)
            except TimeoutError:
                continue
            await asyncio.sleep(len(text) / bytes_per_s)  # the link's rate
            view.bytes_read += len(text)
            now = time.time()
            msg = json.loads(text)
            for f in msg if isinstance(msg, list) else [msg]:
                kind = f.get("type")
                if kind == "ping":
                    await ws.send(json.dumps({"type": "pong", "id": f["data"]["id"]}))
                elif kind == "gap":
                    view.gaps += 1
                elif kind == "snapshot":
                    view.snapshots += 1
                    view.snapshot_bytes.append(len(text))
                if kind in ("iteration", "snapshot") and "ts" in f:
                    view.staleness.append((time.monotonic() - start, now - f["ts"]))
    return view
