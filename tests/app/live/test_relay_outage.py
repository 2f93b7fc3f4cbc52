"""A PostgreSQL outage made for real (the server terminates every backend of the database):
the relay reconnects with backoff (and /healthz counts it), frames reach
the other dashboard's viewers again, every jump in their numbering is marked, and the
origin's recording has no hole."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import httpx
import psycopg
import websockets
from sqlalchemy import select

from app.db.models import EventRecord, IterationRecord
from app.db.session import make_engine, make_sessionmaker
from tests.conftest import PG_ADMIN, ROOT, server_process


def _terminate_backends(url: str) -> int:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchall()
    return len(rows)


async def _frames(ws: websockets.ClientConnection, seconds: float) -> list[dict]:
    out: list[dict] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            msg = json.loads(await asyncio.wait_for(ws.recv(), 0.5))
        except TimeoutError:
            continue
        out.extend(msg if isinstance(msg, list) else [msg])
    return out


def test_relay_recovers_from_terminated_connections(pg_url: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "app.cli", "db", "upgrade", "--database-url", pg_url],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    with (
        server_process(database_url=pg_url, engine="false") as observer,
        server_process(database_url=pg_url, workload="poisson", workload_rate=30) as origin,
    ):
        session = httpx.get(origin.url + "/api/state").json()["session"]
        with origin.client() as c:  # busy for the whole test (server_process: no workload)
            c.post("/api/requests", json={"prompt_len": 50, "max_tokens": 900, "count": 16})

        async def scenario() -> tuple[list[dict], list[dict]]:
            async with websockets.connect(observer.ws_url + "/ws/live", max_size=None) as ws:
                await ws.send(json.dumps({"type": "hello", "session": None}))
                before = await _frames(ws, 3.0)
                assert _terminate_backends(pg_url) >= 3
                after = await _frames(ws, 5.0)
                return before, after

        before, after = asyncio.run(scenario())
        assert any(f["type"] == "iteration" and f["session"] == session for f in before)
        after = [f for f in after if f.get("session") in (session, None)]
        assert any(f["type"] == "iteration" for f in after), "no frames after the outage"
        last = None
        for f in after:  # every jump in numbering is a marked gap or a resync
            if f["type"] == "snapshot":
                last = f["seq"]
            elif f.get("seq") is not None and f["type"] != "gap":
                if last is not None and f["seq"] != last + 1:
                    raise AssertionError(f"silent hole before seq {f['seq']} (after {last})")
                if f["type"] == "session" and f["data"].get("event") == "gap":
                    pass
                last = f["seq"]
        for url in (origin.url, observer.url):
            health = httpx.get(url + "/healthz")
            assert health.status_code == 200, health.text
            assert health.json()["checks"]["relay"]["info"]["reconnects"] >= 1
    engine = make_engine(pg_url)
    with make_sessionmaker(engine)() as db:
        seqs = sorted(
            list(
                db.scalars(select(IterationRecord.seq).where(IterationRecord.session_id == session))
            )
            + list(db.scalars(select(EventRecord.seq).where(EventRecord.session_id == session)))
        )
    engine.dispose()
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) > 100
