"""Two dashboard processes on one PostgreSQL: a frame produced on one reaches a browser
client of the other through LISTEN/NOTIFY, with the origin's seq numbering; a process
alone on the database sends nothing."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import websockets

from tests.conftest import cli, server_process


async def test_frames_of_one_dashboard_reach_clients_of_another(pg_url: str) -> None:
    cli("db", "upgrade", "--database-url", pg_url, check=True)
    with server_process(database_url=pg_url, engine="false") as observer:
        async with websockets.connect(observer.ws_url + "/ws/live") as ws:
            await ws.send(json.dumps({"type": "hello", "session": None, "last_seq": None}))
            first = json.loads(await ws.recv())
            assert first["session"] is None  # nothing to watch yet
            with server_process(
                database_url=pg_url, workload="poisson", workload_rate=20
            ) as origin:
                origin_session = httpx.get(origin.url + "/api/state").json()["session"]
                with origin.client() as c:
                    c.post("/api/requests", json={"prompt_len": 50, "max_tokens": 20, "count": 4})
                seen: list[dict[str, Any]] = []
                snapshot_seq = None
                while len([f for f in seen if f["type"] == "iteration"]) < 20:
                    msg = json.loads(await asyncio.wait_for(ws.recv(), 15))
                    for frame in msg if isinstance(msg, list) else [msg]:
                        if frame["type"] == "snapshot" and frame["session"] == origin_session:
                            snapshot_seq = frame["seq"]
                            seen = []
                        elif frame["type"] in ("iteration", "request", "config"):
                            seen.append(frame)
                assert snapshot_seq is not None
                assert {f["session"] for f in seen} == {origin_session}
                seqs = [f["seq"] for f in seen]
                assert seqs == list(range(snapshot_seq + 1, snapshot_seq + 1 + len(seqs)))
                health = httpx.get(observer.url + "/healthz").json()
                assert health["checks"]["relay"]["info"]["received"] > 20
    # Only the origin recorded the session: one row, no duplicate-key failures.
    listing = cli("sessions", "--json", "--database-url", pg_url, check=True)
    assert [s["id"] for s in json.loads(listing.stdout)] == [origin_session]


def _relay(url: str) -> dict[str, Any]:
    info: dict[str, Any] = httpx.get(url + "/healthz").json()["checks"]["relay"]["info"]
    return info


def _until(check: Callable[[], bool], what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


async def test_a_dashboard_alone_on_the_database_relays_nothing(pg_url: str) -> None:
    """Frames are NOTIFYed only while another dashboard process listens (each says hello
    on the channel): alone, the origin neither encodes nor sends them (`unsent` counts
    them); an observer that starts gets the origin's frames; once it stops, the origin
    stops sending again."""
    cli("db", "upgrade", "--database-url", pg_url, check=True)
    with server_process(database_url=pg_url) as origin, origin.client() as c:
        session = httpx.get(origin.url + "/api/state").json()["session"]

        def busy() -> None:
            c.post("/api/requests", json={"prompt_len": 50, "max_tokens": 100, "count": 4})

        busy()
        _until(lambda: _relay(origin.url)["unsent"] > 50, "the origin published no frame")
        alone = _relay(origin.url)
        assert alone["sent"] == 0 and alone["peers"] == 0, alone
        with server_process(database_url=pg_url, engine="false") as observer:
            async with websockets.connect(observer.ws_url + "/ws/live") as ws:
                await ws.send(json.dumps({"type": "hello", "session": None, "last_seq": None}))
                busy()
                got = 0
                while got < 10:
                    msg = json.loads(await asyncio.wait_for(ws.recv(), 30))
                    for frame in msg if isinstance(msg, list) else [msg]:
                        got += frame["type"] == "iteration" and frame["session"] == session
            shared = _relay(origin.url)
            assert shared["peers"] == 1 and shared["sent"] > 0, shared

        # The observer's hellos stop: after PEER_TTL_S the origin sends nothing more.
        def quiet() -> bool:
            before = _relay(origin.url)
            busy()

            def more(r: dict[str, Any]) -> int:
                return int(r["sent"] + r["unsent"] - before["sent"] - before["unsent"])

            _until(lambda: more(_relay(origin.url)) > 0, "the origin published no frame")
            return bool(_relay(origin.url)["sent"] == before["sent"])

        _until(quiet, "the origin still sends with nobody listening")
        assert _relay(origin.url)["peers"] == 0
