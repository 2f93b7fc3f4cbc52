"""A PostgreSQL outage made for real (the server terminates backends of the database): the
relay reconnects with backoff (and /healthz counts it), frames reach the other dashboard's
viewers again, every jump in their numbering is marked, and the origin's recording has no
hole.

Frames NOTIFYed while a dashboard is not LISTENing never reach it (PostgreSQL keeps no
backlog for a channel nobody listens on). Whether that happens when every backend is
terminated is a race between the origin's sender and the observer's listener reconnecting;
terminating only the listening connections makes it certain."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import websockets

from app.live.relay import APPLICATION_NAME
from tests.app.records.helpers import recorded
from tests.conftest import cli, server_process, terminate_backends


async def _frames(ws: websockets.ClientConnection, seconds: float) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            msg = json.loads(await asyncio.wait_for(ws.recv(), 0.5))
        except TimeoutError:
            continue
        out.extend(msg if isinstance(msg, list) else [msg])
    return out


def _gap_marks(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The relay's gap marks in a viewer's stream, after checking that every frame follows
    the one before it: by one, or from a snapshot (a resync), or past a gap mark.

    A gap mark is a `session` frame `{"event": "gap", "from_seq", "to_seq"}` published at
    the first missing seq (docs/protocol.md): it stands for the whole range, so the next
    frame is to_seq + 1. The viewer's own `gap` (it fell behind) is followed by a snapshot.
    """
    marks: list[dict[str, Any]] = []
    last = None
    for f in frames:
        if f["type"] == "snapshot":
            last = f["seq"]
        elif f.get("seq") is not None and f["type"] != "gap":
            if last is not None and f["seq"] != last + 1:
                raise AssertionError(f"silent hole before seq {f['seq']} (after {last})")
            last = f["seq"]
            if f["type"] == "session" and f["data"].get("event") == "gap":
                assert f["data"]["from_seq"] == f["seq"] <= f["data"]["to_seq"], f
                last = f["data"]["to_seq"]
                marks.append(f["data"])
    return marks


def _outage(
    pg_url: str, application_name: str | None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Watch the origin's session on the observer across an outage (the backends of
    `application_name`, or all): the relay's gap marks its viewer got, and its relay's
    state."""
    cli("db", "upgrade", "--database-url", pg_url, check=True)
    with (
        server_process(database_url=pg_url, engine="false") as observer,
        server_process(database_url=pg_url, workload="poisson", workload_rate=30) as origin,
    ):
        session = httpx.get(origin.url + "/api/state").json()["session"]
        with origin.client() as c:  # busy for the whole test (server_process: no workload)
            c.post("/api/requests", json={"prompt_len": 50, "max_tokens": 900, "count": 16})

        async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            async with websockets.connect(observer.ws_url + "/ws/live", max_size=None) as ws:
                await ws.send(json.dumps({"type": "hello", "session": None}))
                before = await _frames(ws, 3.0)
                # Every backend: both relays' two connections and the origin's recorder.
                expected = 2 if application_name else 3
                assert terminate_backends(pg_url, application_name) >= expected
                after = await _frames(ws, 5.0)
                return before, after

        before, after = asyncio.run(scenario())
        assert any(f["type"] == "iteration" and f["session"] == session for f in before)
        after = [f for f in after if f.get("session") in (session, None)]
        assert any(f["type"] == "iteration" for f in after), "no frames after the outage"
        marks = _gap_marks([f for f in before if f.get("session") in (session, None)] + after)
        for url in (origin.url, observer.url):
            health = httpx.get(url + "/healthz")
            assert health.status_code == 200, health.text
            assert health.json()["checks"]["relay"]["info"]["reconnects"] >= 1
        relay = httpx.get(observer.url + "/healthz").json()["checks"]["relay"]["info"]
    seqs, _ = recorded(pg_url, session)
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) > 100
    return marks, relay


def test_relay_recovers_from_terminated_connections(pg_url: str) -> None:
    _outage(pg_url, None)  # frames lost or not (a race), no hole is silent


def test_frames_sent_while_a_dashboard_is_not_listening_are_a_marked_gap(pg_url: str) -> None:
    marks, relay = _outage(pg_url, f"{APPLICATION_NAME} listen")
    assert relay["gaps"] >= 1, relay  # the origin sent on while the observer was away
    assert marks, "the viewer got no gap mark for the frames its dashboard missed"
