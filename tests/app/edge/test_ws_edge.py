"""Hostile websocket input: binary frames, deeply nested JSON, fields of the wrong type or
out of range. Every one is answered with an error frame or a close code, the socket is
never just dropped, and a node keeps its counters. Real uvicorn, real websockets."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
import websockets

from tests.conftest import TOKEN, LiveServer

DEEP = "[" * 3000 + "]" * 3000


async def _error(ws: Any) -> str:
    while True:
        msg = json.loads(await asyncio.wait_for(ws.recv(), 5))
        for f in msg if isinstance(msg, list) else [msg]:
            if f.get("type") == "error":
                return str((f.get("data") or f).get("detail"))


async def _closed_with(ws: Any) -> int:
    with pytest.raises(websockets.ConnectionClosed) as info:
        while True:
            await asyncio.wait_for(ws.recv(), 5)
    assert info.value.rcvd is not None, "dropped without a close frame"
    return info.value.rcvd.code


def test_live_socket_answers_bad_input_and_stays_open(live_server: LiveServer) -> None:
    async def scenario() -> None:
        async with websockets.connect(live_server.ws_url + "/ws/live") as ws:
            await ws.send(DEEP)
            assert await _closed_with(ws) == 1002
        async with websockets.connect(live_server.ws_url + "/ws/live") as ws:
            await ws.send(b"\x00\x01binary")
            assert await _closed_with(ws) == 1002
        for session in (["x"], "a\x00b", "x" * 129, ""):
            async with websockets.connect(live_server.ws_url + "/ws/live") as ws:
                await ws.send(json.dumps({"type": "hello", "session": session}))
                assert await _closed_with(ws) == 1002, session
        async with websockets.connect(live_server.ws_url + "/ws/live") as ws:
            await ws.send(json.dumps({"type": "hello", "session": None, "acks": True}))
            assert json.loads(await ws.recv())["type"] == "snapshot"
            await ws.send(b"binary")
            assert "binary" in await _error(ws)
            await ws.send(DEEP)
            assert "nested" in await _error(ws)
            await ws.send(json.dumps({"type": "pong", "id": "x"}))
            assert "only" in await _error(ws)
            await ws.send(json.dumps({"type": "hello", "session": None}))
            while json.loads(await ws.recv()).get("type") != "snapshot":
                pass
        async with websockets.connect(live_server.ws_url + "/ws/live") as ws:  # replay
            await ws.send(json.dumps({"type": "hello", "session": "s-none", "mode": "replay"}))
            assert "no recorded session" in await _error(ws)
            assert await _closed_with(ws) == 4004

    asyncio.run(scenario())


def test_ingest_answers_bad_fields_and_keeps_the_node(live_server: LiveServer) -> None:
    async def scenario() -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with websockets.connect(
            live_server.ws_url + "/ws/ingest", additional_headers=headers
        ) as ws:
            await ws.send(DEEP)
            assert await _closed_with(ws) == 1002
        async with websockets.connect(
            live_server.ws_url + "/ws/ingest", additional_headers=headers
        ) as ws:
            await ws.send(json.dumps({"type": "announce", "node": "fuzzed", "session": "s-fz"}))
            assert json.loads(await ws.recv())["type"] == "welcome"
            bad: list[Any] = [
                b"binary",
                DEEP,
                {"type": "reply", "id": "abc", "ok": True},
                {"type": "reply", "id": 2**80},
                {"type": "stats", "buffered": -1, "dropped": 0},
                {"type": "stats", "buffered": "x"},
                {"type": "stats", "buffered": 1e400},
                {"type": "iteration", "seq": 2**70, "data": {}},
                {"type": "session", "seq": 1, "data": {"event": "opened", "started_at": "x"}},
                {"type": "session", "seq": 1, "data": {"event": "opened", "config": [1]}},
                {
                    "type": "request",
                    "seq": 1,
                    "data": {"req": "r", "kind": "arrived", "step": 1, "t": float("nan")},
                },
                [1, 2],
            ]
            for item in bad:
                text = item if isinstance(item, (bytes, str)) else json.dumps(item)
                await ws.send(text)
                assert await _error(ws), item
            await ws.send(json.dumps({"type": "stats", "buffered": 5, "dropped": 1}))
            await ws.send(json.dumps({"type": "session", "seq": 1, "data": {"event": "opened"}}))
            await asyncio.sleep(0.3)
            node = next(
                n for n in httpx.get(live_server.url + "/api/nodes").json() if n["node"] == "fuzzed"
            )
            assert node["invalid"] == len(bad) + 1  # the list's two non-objects count once each
            assert node["lag"] == 5 and node["frames"] == 1 and node["state"] == "live"

    asyncio.run(scenario())
