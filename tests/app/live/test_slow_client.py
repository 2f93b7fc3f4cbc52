"""A viewer reading far slower than frames are produced (a slow link: the kernel would
buffer megabytes) is cut over to a gap and a small snapshot within seconds, instead of
being shown frames tens of seconds late; a fast viewer beside it misses nothing."""

from __future__ import annotations

import asyncio
import json

import httpx
import websockets

from bench.slow_client import slow_viewer
from tests.conftest import server_process


async def _fast(ws_url: str, seconds: float) -> list[list[int]]:
    """The seqs the viewer was sent, one run per snapshot (a snapshot starts a run)."""
    runs: list[list[int]] = [[]]
    async with websockets.connect(ws_url + "/ws/live", max_size=None) as ws:
        await ws.send(json.dumps({"type": "hello", "session": None, "acks": True}))
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while loop.time() < end:
            try:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 0.5))
            except TimeoutError:
                continue
            for f in msg if isinstance(msg, list) else [msg]:
                if f["type"] == "ping":
                    await ws.send(json.dumps({"type": "pong", "id": f["data"]["id"]}))
                elif f["type"] == "snapshot":
                    runs.append([f["seq"]])
                elif f.get("seq") and f["type"] != "gap":
                    runs[-1].append(f["seq"])
    return [r for r in runs if r]


def test_a_slow_viewer_is_resynced_within_seconds(tmp_path: object) -> None:
    # The engine at 5x model speed: far more than a 120 KB/s link carries, and what a
    # Python client in this (shared) process reads.
    with server_process(sim_speed=5) as server:
        with server.client() as c:
            c.post("/api/requests", json={"prompt_len": 64, "max_tokens": 1000, "count": 256})

        async def scenario() -> tuple[object, list[list[int]]]:
            return await asyncio.gather(
                slow_viewer(server.ws_url, 8.0, 120_000), _fast(server.ws_url, 8.0)
            )

        view, fast = asyncio.run(scenario())
        assert httpx.get(server.url + "/healthz").status_code == 200
    late = [age for at, age in view.staleness if at > 2.0]  # type: ignore[attr-defined]
    assert late, "the slow viewer saw no frames"
    assert max(late) < 4.0, f"frames up to {max(late):.1f}s stale"
    assert view.gaps >= 1  # type: ignore[attr-defined]
    assert max(view.snapshot_bytes) < 400_000  # type: ignore[attr-defined]
    # The fast viewer's stream has no hole between snapshots (on a loaded machine it may
    # itself have been resynced once or twice), and it kept up: hundreds of frames.
    for run in fast:
        assert run == list(range(run[0], run[0] + len(run)))
    assert sum(len(run) for run in fast) > 200
