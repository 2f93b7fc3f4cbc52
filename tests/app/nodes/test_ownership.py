"""A session belongs to the producer that created it: nobody can announce the local
engine's session or another producer's; resuming needs the key the creator was issued;
the dashboard's controls keep driving the local engine. Ingest refuses browser pages and
the viewer's cookie. Real uvicorn, real websockets."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
import websockets

from tests.conftest import TOKEN, LiveServer


async def _announce(live: LiveServer, **fields: Any) -> tuple[Any, dict[str, Any]]:
    ws = await websockets.connect(
        live.ws_url + "/ws/ingest", additional_headers={"Authorization": f"Bearer {TOKEN}"}
    )
    await ws.send(json.dumps({"type": "announce", "node": "n", **fields}))
    return ws, json.loads(await ws.recv())


async def _refused(live: LiveServer, **fields: Any) -> str:
    ws, answer = await _announce(live, **fields)
    assert answer["type"] == "error", answer
    with pytest.raises(websockets.ConnectionClosed) as info:
        await ws.recv()
    assert info.value.rcvd is not None and info.value.rcvd.code == 1008
    return str(answer["detail"])


def test_sessions_cannot_be_claimed_by_another_producer(live_server: LiveServer) -> None:
    local = httpx.get(live_server.url + "/api/state").json()["session"]
    assert local

    async def scenario() -> None:
        assert "belongs to another producer" in await _refused(live_server, session=local)
        ws, welcome = await _announce(live_server, session="s-mine-1")
        key = welcome["resume_key"]
        assert welcome["session"] == "s-mine-1" and key
        opened = {"event": "opened", "name": "mine"}
        await ws.send(
            json.dumps({"type": "session", "session": "s-mine-1", "seq": 1, "data": opened})
        )
        await asyncio.sleep(0.2)
        await ws.close()
        assert "belongs" in await _refused(live_server, session="s-mine-1")
        assert "belongs" in await _refused(live_server, session="s-mine-1", resume_key="guess")
        again, welcome = await _announce(live_server, session="s-mine-1", resume_key=key)
        assert welcome == {"type": "welcome", "session": "s-mine-1", "last_seq": 1}
        await again.close()
        assert "session:" in await _refused(live_server, session="bad id\x00")

    asyncio.run(scenario())
    with live_server.client() as c:  # the local engine is still the one the controls drive
        assert c.post("/api/pause").status_code == 200
        assert httpx.get(live_server.url + "/api/state").json()["paused"] is True
        assert c.post("/api/resume").status_code == 200


def test_ingest_refuses_browser_pages_and_the_cookie(live_server: LiveServer) -> None:
    async def scenario() -> None:
        for headers in (
            {"Authorization": f"Bearer {TOKEN}", "Origin": "http://127.0.0.1:9999"},
            {"Cookie": f"batchscope_token={TOKEN}"},
        ):
            with pytest.raises(websockets.InvalidStatus) as info:
                await websockets.connect(
                    live_server.ws_url + "/ws/ingest", additional_headers=headers
                )
            assert info.value.response.status_code == 403, headers

    asyncio.run(scenario())
