"""/ws/live: hello -> snapshot -> batched frames, one sender and one receiver task.

The sender wakes when frames arrive, sends everything queued as one JSON array, then
rests ~40 ms, so a browser gets at most ~25 messages a second whatever the step rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from app.deps import DbDep, HubDep, RecorderDep, SettingsDep
from app.live.hub import EventHub, Subscriber
from app.protocol.envelope import encode, envelope, error_frame
from app.records.replay import ReplayPlayer
from app.security import has_control, origin_allowed

router = APIRouter()

SEND_INTERVAL_S = 0.04
HELLO_TIMEOUT_S = 10.0


async def _send_snapshot(
    ws: WebSocket, hub: EventHub, session: str | None, columns: bool = False
) -> tuple[str | None, int]:
    """`columns`: the client asked for request rows as columns (docs/protocol.md)."""
    sid = session or hub.live_session
    if sid is None or sid not in hub.sessions:
        await ws.send_text(envelope("snapshot", None, 0, "null"))
        return None, 0
    # A snapshot of a 10,000-request session allocates ~10^5 objects at once: a full cyclic
    # collection in the middle would add a few hundred ms to a page's first paint.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        if columns:
            state = hub.sessions[sid].state
            seq = state.seq
            text = envelope("snapshot", sid, seq, encode(state.snapshot(columns=True)))
        else:
            seq, text = hub.snapshot_frame(sid)
    finally:
        if was_enabled:
            gc.enable()
    await ws.send_text(text)
    return sid, seq


async def _sender(
    ws: WebSocket, hub: EventHub, sub: Subscriber, resync: asyncio.Event, columns: bool
) -> None:
    current, last_seq = await _send_snapshot(ws, hub, sub.session, columns)
    while True:
        await sub.wakeup.wait()
        sub.wakeup.clear()
        if sub.gap or resync.is_set():
            if sub.gap:
                gap = envelope("gap", current, last_seq, encode({"dropped": sub.dropped}))
                await ws.send_text(gap)
            sub.gap = False
            sub.dropped = 0
            resync.clear()
            while not sub.queue.empty():
                sub.queue.get_nowait()
            current, last_seq = await _send_snapshot(ws, hub, sub.session, columns)
            continue
        batch: list[str] = []
        while not sub.queue.empty():
            session, seq, text = sub.queue.get_nowait()
            if session == current and seq > last_seq:
                batch.append(text)
                last_seq = seq
        if batch:
            await ws.send_text("[" + ",".join(batch) + "]")
        # Rest between batches (coalescing), unless the queue is filling up: a client
        # that keeps up is never pushed into a gap by the rest itself.
        if sub.queue.qsize() < sub.maxsize // 2:
            await asyncio.sleep(SEND_INTERVAL_S)


async def _receiver(ws: WebSocket, sub: Subscriber, resync: asyncio.Event) -> None:
    while True:
        message = await ws.receive_text()
        try:
            data: Any = json.loads(message)
        except ValueError:
            data = None
        if isinstance(data, dict) and data.get("type") == "hello":
            resync.set()
            sub.wakeup.set()
        else:
            await ws.send_text(error_frame("only 'hello' messages are accepted on /ws/live"))


async def _replay(ws: WebSocket, db: DbDep, recorder: RecorderDep, session: str, step: Any) -> None:
    player = ReplayPlayer(ws, db, session)
    # Replay reads the recording: first write what is still buffered (a session that is
    # live, or just ended, may have its last frames in the recorder's batch).
    if recorder is not None:
        await recorder.flush()
    try:
        if not await player.start(step if isinstance(step, int) else None):
            return
        while True:
            message = await ws.receive_text()
            try:
                data = json.loads(message)
            except ValueError:
                data = None
            if isinstance(data, dict):
                await player.handle(data)
    except WebSocketDisconnect:
        pass
    finally:
        await player.close()


@router.websocket("/ws/live")
async def ws_live(
    ws: WebSocket, settings: SettingsDep, hub: HubDep, db: DbDep, recorder: RecorderDep
) -> None:
    if not origin_allowed(ws):
        await ws.close(code=1008, reason="foreign origin")
        return
    if not (settings.view_open and settings.is_loopback) and not has_control(ws):  # type: ignore[arg-type]
        await ws.close(code=1008, reason="token required")
        return
    await ws.accept()
    try:
        hello = json.loads(await asyncio.wait_for(ws.receive_text(), HELLO_TIMEOUT_S))
    except (TimeoutError, ValueError, WebSocketDisconnect):
        with contextlib.suppress(Exception):
            await ws.close(code=1002, reason="expected a hello message first")
        return
    if not isinstance(hello, dict) or hello.get("type") != "hello":
        await ws.close(code=1002, reason="expected a hello message first")
        return
    session = hello.get("session")
    if session is not None and not isinstance(session, str):
        await ws.close(code=1002, reason="session must be a string or null")
        return
    if session is not None and (session not in hub.sessions or hello.get("mode") == "replay"):
        await _replay(ws, db, recorder, session, hello.get("step"))
        return
    resync = asyncio.Event()
    async with hub.subscribe(session, settings.ws_queue_frames) as sub:
        tasks = [
            asyncio.create_task(_sender(ws, hub, sub, resync, hello.get("rows") == "columns")),
            asyncio.create_task(_receiver(ws, sub, resync)),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
