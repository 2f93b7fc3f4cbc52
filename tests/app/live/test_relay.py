"""Two dashboard processes on one PostgreSQL: a frame produced on one reaches a browser
client of the other through LISTEN/NOTIFY, with the origin's seq numbering."""

from __future__ import annotations

import asyncio
import json

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
                seen: list[dict] = []
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
