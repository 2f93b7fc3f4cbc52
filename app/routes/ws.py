"""/ws/live: hello -> snapshot -> batched frames, one sender and one receiver task.

The sender wakes when frames arrive, sends everything queued as one JSON array, then
rests ~40 ms, so a browser gets at most ~25 messages a second whatever the step rate.
A client that falls behind (by time: app.live.pacing) gets a gap and a small snapshot.
Every refusal is an error frame or a close code; an unexpected failure closes with 1011.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from app.deps import DbDep, HubDep, RecorderDep, SettingsDep
from app.edge.bounded_json import JsonRefused, loads
from app.edge.bounds import is_clean_id
from app.edge.wsio import BadMessage, close, closing_on_error, receive_json
from app.live.hub import EventHub, Subscriber
from app.live.pacing import MAX_BATCH_BYTES, ClientPace
from app.records.replay import ReplayPlayer
from app.security import has_control, origin_allowed
from protocol.codes import FrameType, MessageType
from protocol.envelope import encode, envelope, error_frame
from protocol.tasks import cancel_and_wait

router = APIRouter()

SEND_INTERVAL_S = 0.04
HELLO_TIMEOUT_S = 10.0
MAX_HELLO_BYTES = 4096
REST_S = 0.1
PROTOCOL_ERROR = 1002


async def _send_snapshot(
    ws: WebSocket,
    hub: EventHub,
    session: str | None,
    compact: bool = False,
    pace: ClientPace | None = None,
    columns: bool = False,
) -> tuple[str | None, int]:
    """`columns`: the client asked for request rows as columns (docs/protocol.md)."""
    sid = session or hub.live_session
    if sid is None or sid not in hub.sessions:
        await ws.send_text(envelope(FrameType.SNAPSHOT, None, 0, "null"))
        return None, 0
    # A snapshot of a 10,000-request session allocates ~10^5 objects at once: a full cyclic
    # collection in the middle would add a few hundred ms to a page's first paint.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        seq, text = hub.snapshot_frame(sid, compact=compact, columns=columns)
    finally:
        if was_enabled:
            gc.enable()
    await ws.send_text(text)
    if pace is not None:
        pace.sent(len(text))
    return sid, seq


async def _wait_any(events: tuple[asyncio.Event, ...], timeout: float) -> None:
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


async def _sender(
    ws: WebSocket,
    hub: EventHub,
    sub: Subscriber,
    resync: asyncio.Event,
    pace: ClientPace,
    columns: bool,
    stale_after_s: float,
) -> None:
    """`stale_after_s`: a frame queued this long, or a send blocked this long, and the
    client fell behind (settings.ws_stale_after_s)."""
    current, last_seq = await _send_snapshot(ws, hub, sub.session, pace=pace, columns=columns)
    await _ping(ws, pace)
    while True:
        await _wait_any((sub.wakeup, pace.answered, resync), REST_S if pace.pings else 5.0)
        sub.wakeup.clear()
        pace.answered.clear()
        now = time.monotonic()
        if not sub.gap and sub.oldest_age(now) > stale_after_s:
            sub.fall_behind()  # frames wait too long for this client: it is behind
        if pace.holding(now):
            continue  # let the client read what is already on its way
        if sub.gap or resync.is_set():
            compact = sub.gap
            if sub.gap:
                gap = envelope(FrameType.GAP, current, last_seq, encode({"dropped": sub.dropped}))
                await ws.send_text(gap)
            sub.gap = False
            sub.dropped = 0
            resync.clear()
            while not sub.queue.empty():
                sub.queue.get_nowait()
            current, last_seq = await _send_snapshot(ws, hub, sub.session, compact, pace, columns)
            await _ping(ws, pace)
            continue
        batch: list[str] = []
        size = 0
        while not sub.queue.empty() and size < MAX_BATCH_BYTES:
            session, seq, text, _at = sub.queue.get_nowait()
            if session == current and seq > last_seq:
                batch.append(text)
                size += len(text)
                last_seq = seq
        if batch:
            started = time.monotonic()
            await ws.send_text("[" + ",".join(batch) + "]")
            pace.sent(size)
            if time.monotonic() - started > stale_after_s:
                sub.fall_behind()  # the transport pushed back that long: behind
            await _ping(ws, pace)
        if not sub.queue.empty():
            sub.wakeup.set()  # more than one batch was waiting
        # Rest between batches (coalescing), unless the queue is filling up: a client
        # that keeps up is never pushed into a gap by the rest itself.
        if sub.queue.qsize() < sub.maxsize // 2:
            await asyncio.sleep(SEND_INTERVAL_S)


async def _ping(ws: WebSocket, pace: ClientPace) -> None:
    ping = pace.ping(time.monotonic())
    if ping is not None:
        await ws.send_text(envelope(MessageType.PING, None, None, encode({"id": ping})))


async def _receiver(
    ws: WebSocket, sub: Subscriber, resync: asyncio.Event, pace: ClientPace
) -> None:
    while True:
        try:
            data: Any = await receive_json(ws)
        except BadMessage as exc:
            await ws.send_text(error_frame(str(exc)))
            continue
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == MessageType.HELLO:
            resync.set()
            sub.wakeup.set()
        elif kind == MessageType.PONG and pace.pong(data.get("id")):
            pass
        else:
            await ws.send_text(error_frame("only 'hello' and 'pong' messages are accepted here"))


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
            try:
                data = await receive_json(ws)
            except BadMessage as exc:
                await ws.send_text(error_frame(str(exc)))
                continue
            if isinstance(data, dict):
                await player.handle(data)
            else:
                await ws.send_text(error_frame("a replay command must be an object"))
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
    async with closing_on_error(ws, "live"):
        await _serve_viewer(ws, settings, hub, db, recorder)


async def _hello(ws: WebSocket) -> Any:
    """The client's hello: from the URL (`?hello=JSON`: the server need not wait until the
    page's main thread is free to send it) or else the first message; None if neither."""
    if "hello" in ws.query_params:
        try:
            return loads(ws.query_params["hello"], MAX_HELLO_BYTES)
        except JsonRefused:
            return None
    try:
        return await asyncio.wait_for(receive_json(ws), HELLO_TIMEOUT_S)
    except (TimeoutError, BadMessage):
        return None


async def _serve_viewer(
    ws: WebSocket, settings: SettingsDep, hub: HubDep, db: DbDep, recorder: RecorderDep
) -> None:
    hello = await _hello(ws)
    if not isinstance(hello, dict) or hello.get("type") != MessageType.HELLO:
        await close(ws, PROTOCOL_ERROR, "expected a hello message first")
        return
    session = hello.get("session")
    if session is not None and not is_clean_id(session):
        await close(ws, PROTOCOL_ERROR, "session: a session id (printable, at most 128) or null")
        return
    if session is not None and (session not in hub.sessions or hello.get("mode") == "replay"):
        await _replay(ws, db, recorder, session, hello.get("step"))
        return
    resync = asyncio.Event()
    pace = ClientPace(acks=hello.get("acks") is True)
    async with hub.subscribe(session, settings.ws_queue_frames) as sub:
        tasks = [
            asyncio.create_task(
                _sender(
                    ws,
                    hub,
                    sub,
                    resync,
                    pace,
                    columns=hello.get("rows") == "columns",
                    stale_after_s=settings.ws_stale_after_s,
                )
            ),
            asyncio.create_task(_receiver(ws, sub, resync, pace)),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await cancel_and_wait(tasks)
        for task in done:
            exc = task.exception()
            if exc is not None and not isinstance(exc, WebSocketDisconnect):
                raise exc
