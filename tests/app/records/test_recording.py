"""Record through a real server, restart it, replay: the same frames, the same states.
Both backends for real: a SQLite file and the PostgreSQL server on 127.0.0.1:5432."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import websockets

from app.frames.fold import SessionState
from tests.conftest import LiveServer, cli, server_process


class Folding:
    """A client-side fold of live frames, remembering the state as of each step."""

    def __init__(self, session: str) -> None:
        self.state = SessionState(session)
        self.frames: list[dict[str, Any]] = []
        self.states: dict[int, dict[str, Any]] = {}

    def add(self, frame: dict[str, Any]) -> None:
        step = frame["data"].get("step", self.state.step + 1)
        if step > self.state.step >= 0 and self.state.step not in self.states:
            self.states[self.state.step] = self.state.snapshot()
        self.state.apply(frame["type"], frame["seq"], frame["data"])
        self.frames.append(frame)


async def _record_live(live: LiveServer) -> Folding:
    async with websockets.connect(live.ws_url + "/ws/live") as ws:
        await ws.send(json.dumps({"type": "hello", "session": None, "last_seq": None}))
        snap = json.loads(await ws.recv())
        assert snap["seq"] == 1  # only the session-opened mark so far
        fold = Folding(snap["session"])
        fold.state.apply("session", 1, {"event": "opened", **snap["data"]["meta"]})
        fold.frames.append({"seq": 1})  # placeholder for the opened mark
        with live.client() as c:
            for i in range(3):
                r = c.post(
                    "/api/requests",
                    json={
                        "prompt_len": 20 + 15 * i,
                        "max_tokens": 12,
                        "count": 4,
                        "shared_prefix": "system",
                    },
                )
                assert r.status_code == 201
            c.post("/api/config", json={"max_num_batched_tokens": 48})
        finished = 0
        while finished < 12:
            msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
            for frame in msg if isinstance(msg, list) else [msg]:
                fold.add(frame)
                if frame["type"] == "request" and frame["data"]["kind"] == "finished":
                    finished += 1
        await asyncio.sleep(1.0)  # let the recorder flush
        return fold


async def _replay_all(ws_url: str, session: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    async with websockets.connect(ws_url + "/ws/live") as ws:
        await ws.send(json.dumps({"type": "hello", "session": session, "last_seq": None}))
        last = json.loads(await ws.recv())
        assert last["type"] == "snapshot" and last["data"]["replay"]["steps"] > 0
        await ws.send(json.dumps({"type": "seek", "step": -1}))
        start = json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "play", "speed": 1000}))
        frames: list[dict[str, Any]] = []
        while not frames or frames[-1]["seq"] < last["seq"]:
            msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
            frames.extend(msg if isinstance(msg, list) else [msg])
        return start, frames


async def test_record_restart_and_replay_identically(database_url: str) -> None:
    assert cli("db", "upgrade", "--database-url", database_url).returncode == 0
    with server_process(database_url=database_url) as live:
        fold = await _record_live(live)
    session = fold.state.session
    listing = json.loads(cli("sessions", "--json", "--database-url", database_url).stdout)
    assert [s["id"] for s in listing] == [session]
    assert listing[0]["requests"] == 12

    with server_process(database_url=database_url) as live:
        start, frames = await _replay_all(live.ws_url, session)
        assert start["seq"] == 0 or start["data"]["step"] == -1
        live_frames = [f for f in fold.frames if "type" in f]
        # Seq 1 (the session-opened mark) reached the live client inside its snapshot.
        assert frames[0]["seq"] == 1 and frames[0]["type"] == "session"
        replayed = [f for f in frames[1:] if f["seq"] <= live_frames[-1]["seq"]]
        assert [f["seq"] for f in replayed] == [f["seq"] for f in live_frames]
        assert replayed == live_frames

        rng = random.Random(7)
        steps = sorted(fold.states)
        with live.client() as c:
            assert c.get("/api/sessions/nope/state").status_code == 404
            for k in [*rng.sample(steps, min(8, len(steps))), steps[0], steps[-1]]:
                rebuilt = c.get(f"/api/sessions/{session}/state", params={"step": k}).json()
                expected = fold.states[k]
                for key in ("step", "requests", "blocks", "history", "config", "totals"):
                    assert rebuilt[key] == expected[key], (k, key)
