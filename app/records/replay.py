"""Replay of a recorded session over the same socket and frame protocol as live.

After the hello, the client steers with `{"type": "seek", "step": k}`,
`{"type": "play", "speed": x}`, `{"type": "pause"}` and `{"type": "step", "delta": ±1}`.
A seek answers with a snapshot of the state at step k (nearest checkpoint + the frames
after it); play streams the recorded frames paced by their recorded times.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import WebSocket
from sqlalchemy.orm import Session, sessionmaker

from app.db.queries import SessionRow, get_session, iter_frames, state_at_step
from app.errors import NotFound
from protocol.codes import FrameType, MessageType, ReplayCommand
from protocol.envelope import encode, envelope, error_frame
from protocol.views import ReplayStatus, SnapshotData

MAX_SPEED = 1000.0
MAX_PAUSE_S = 1.0


class ReplayPlayer:
    def __init__(self, ws: WebSocket, db: sessionmaker[Session], session_id: str) -> None:
        self.ws = ws
        self.db = db
        self.session_id = session_id
        self.num_steps = 0
        self.seq = 0
        self.step = -1
        self.playing = False
        self.speed = 1.0
        self._player: asyncio.Task[None] | None = None

    def _load(self, step: int) -> tuple[SessionRow, SnapshotData]:
        with self.db() as db:
            meta = get_session(db, self.session_id)
            state = state_at_step(db, self.session_id, step)
            return meta, state.snapshot()

    async def start(self, step: int | None) -> bool:
        try:
            meta, _ = await asyncio.to_thread(self._load, -1)
        except NotFound as exc:
            await self.ws.send_text(error_frame(str(exc)))
            await self.ws.close(code=4004, reason="unknown session")
            return False
        self.num_steps = meta["steps"]
        await self.seek(self.num_steps - 1 if step is None else step)
        return True

    async def seek(self, step: int) -> None:
        await self.pause()
        step = max(-1, min(int(step), self.num_steps - 1))
        meta, snap = await asyncio.to_thread(self._load, step)
        self.num_steps = meta["steps"]
        self.seq, self.step = snap["seq"], snap["step"]
        snap["replay"] = self._status()
        await self.ws.send_text(
            envelope(FrameType.SNAPSHOT, self.session_id, self.seq, encode(snap))
        )

    def _status(self) -> ReplayStatus:
        return {
            "steps": self.num_steps,
            "step": self.step,
            "playing": self.playing,
            "speed": self.speed,
        }

    async def play(self, speed: float, until_step: int | None = None) -> None:
        await self.pause()
        self.speed = max(0.01, min(float(speed), MAX_SPEED))
        self.playing = True
        self._player = asyncio.create_task(self._stream(until_step))

    async def pause(self) -> None:
        task, self._player = self._player, None
        self.playing = False
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _page(self, after: int) -> list[tuple[int, str]]:
        with self.db() as db:
            out = []
            for item in iter_frames(db, self.session_id, after, after + 1000):
                out.append(item)
            return out

    async def _stream(self, until_step: int | None) -> None:
        last_t: float | None = None
        batch: list[str] = []
        while True:
            page = await asyncio.to_thread(self._page, self.seq)
            if not page:
                break
            for seq, text in page:
                frame = json.loads(text)
                if frame["type"] == FrameType.ITERATION:
                    step = frame["data"]["step"]
                    if until_step is not None and step > until_step:
                        await self._flush(batch)
                        self.playing = False
                        return
                    t = frame["data"]["t_start"]
                    if last_t is not None and t > last_t:
                        await self._flush(batch)
                        await asyncio.sleep(min((t - last_t) / self.speed, MAX_PAUSE_S))
                    last_t = t
                    self.step = step
                batch.append(text)
                self.seq = seq
                if len(batch) >= 200:
                    await self._flush(batch)
        await self._flush(batch)
        self.playing = False

    async def _flush(self, batch: list[str]) -> None:
        if batch:
            await self.ws.send_text("[" + ",".join(batch) + "]")
            batch.clear()

    async def handle(self, message: Mapping[str, Any]) -> None:
        kind = message.get("type")
        try:
            command = COMMANDS.get(kind) if isinstance(kind, str) else None
            if command is None:
                raise ValueError(f"unknown replay command {kind!r}")
            await command(self, message)
        except (TypeError, ValueError, OverflowError) as exc:  # Infinity is valid JSON here
            await self.ws.send_text(error_frame(f"{kind}: {exc}"))

    async def _on_seek(self, message: Mapping[str, Any]) -> None:
        await self.seek(int(message.get("step", 0)))

    async def _on_play(self, message: Mapping[str, Any]) -> None:
        await self.play(float(message.get("speed", 1.0)))

    async def _on_pause(self, message: Mapping[str, Any]) -> None:
        del message
        await self.pause()

    async def _on_step(self, message: Mapping[str, Any]) -> None:
        delta = int(message.get("delta", 1))
        if delta >= 0:
            await self.play(MAX_SPEED, until_step=self.step + delta)
        else:
            await self.seek(self.step + delta)

    async def _on_hello(self, message: Mapping[str, Any]) -> None:
        del message
        await self.seek(self.step)

    async def close(self) -> None:
        await self.pause()


COMMANDS: dict[str, Callable[[ReplayPlayer, Mapping[str, Any]], Awaitable[None]]] = {
    ReplayCommand.SEEK.value: ReplayPlayer._on_seek,
    ReplayCommand.PLAY.value: ReplayPlayer._on_play,
    ReplayCommand.PAUSE.value: ReplayPlayer._on_pause,
    ReplayCommand.STEP.value: ReplayPlayer._on_step,
    MessageType.HELLO.value: ReplayPlayer._on_hello,
}
"""A replay viewer's messages after its hello, by type (a repeated hello: resend the
state at the current step)."""
