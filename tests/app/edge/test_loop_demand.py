"""The web process counts who wants its event loop (app.edge.loop_demand): an HTTP request
while it is being answered, a websocket while it is open; the local engine's frame intake
rests for them only. Real uvicorn, real websockets."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import websockets

from tests.conftest import LiveServer


def _until(check: Callable[[], bool], seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return check()


def test_requests_and_websockets_count_while_they_last(live_server: LiveServer) -> None:
    demand = live_server.app.state.loop_demand
    with live_server.client() as c:
        assert c.get("/healthz").status_code in (200, 503)
    assert _until(lambda: demand.open == 0), demand.open

    # A request whose body is still coming is being answered: it counts until it ends.
    release = threading.Event()
    answered: list[int] = []

    def body() -> Iterator[bytes]:
        yield b'{"name": '
        release.wait(30)
        yield b'"x"}'

    def post() -> None:
        with live_server.client() as c:
            answered.append(c.patch("/api/sessions/none", content=body()).status_code)

    poster = threading.Thread(target=post)
    poster.start()
    try:
        assert _until(lambda: demand.open == 1), demand.open
    finally:
        release.set()
        poster.join(30)
    assert answered and 400 <= answered[0] < 500  # no such session: answered, not a 500
    assert _until(lambda: demand.open == 0), demand.open

    async def viewer() -> None:
        async with websockets.connect(live_server.ws_url + "/ws/live"):
            assert await asyncio.to_thread(_until, lambda: demand.open == 1), demand.open
        assert await asyncio.to_thread(_until, lambda: demand.open == 0), demand.open

    asyncio.run(viewer())
    # What a request costs the count is given back even when it fails.
    with httpx.Client(base_url=live_server.url, timeout=10) as c:
        assert c.get("/api/sessions/none/requests").status_code in (401, 403, 404)
    assert _until(lambda: demand.open == 0), demand.open
