"""Live path: engine (SimRunner, full speed) -> hub -> websocket clients.

Prints frames/s delivered to 10 clients and their p99 delivery latency (publish `ts` to
receipt), and engine steps/s with 0 clients, 10 clients and one stalled client, with the
ratios against the 0-client baseline measured in the same run (target >= 0.95).

Run: `python -m bench.live_bench` (starts `batchscope serve` in a subprocess).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import httpx
import websockets

from tests.conftest import LiveServer, server_process

WINDOW_S = 6.0
SETTLE_S = 2.0
CLIENTS = 10


def _step(url: str) -> int:
    step: int = httpx.get(url + "/api/state", timeout=10).json()["step"]
    return step


async def _steps_per_s(url: str) -> float:
    s0, t0 = _step(url), time.monotonic()
    await asyncio.sleep(WINDOW_S)
    return (_step(url) - s0) / (time.monotonic() - t0)


async def _client(
    ws_url: str, stop: asyncio.Event, latencies: list[float], counts: list[int]
) -> None:
    async with websockets.connect(ws_url + "/ws/live", max_size=64 << 20) as ws:
        await ws.send(json.dumps({"type": "hello", "session": None, "last_seq": None}))
        await ws.recv()
        n = 0
        while not stop.is_set():
            try:
                msg = await asyncio.wait_for(ws.recv(), 1.0)
            except TimeoutError:
                continue
            now = time.time()
            frames: Any = json.loads(msg)
            for frame in frames if isinstance(frames, list) else [frames]:
                if "ts" in frame:
                    latencies.append(now - frame["ts"])
                n += 1
        counts.append(n)


def _stalled(port: int) -> socket.socket:
    """A client that says hello and never reads again."""
    from tests.app.routes.test_ws import _raw_ws_hello

    return _raw_ws_hello(port)


@contextlib.contextmanager
def _loaded_server() -> Iterator[LiveServer]:
    """A fresh server (per phase, so no phase measures another's backlog) with 64 long
    decodes, so the flat-out engine stays busy. The recording goes to a SQLite file,
    written by the recorder's writer process, as in production."""
    tmp = tempfile.mkdtemp(prefix="bs-live-bench-")
    db_url = f"sqlite:///{tmp}/bench.db"
    subprocess.run(
        [sys.executable, "-m", "app.cli", "db", "upgrade", "--database-url", db_url],
        check=True,
        capture_output=True,
    )
    with server_process(
        database_url=db_url,
        realtime="false",
        max_num_seqs=64,
        max_num_batched_tokens=2048,
        max_model_len=32768,
        num_gpu_blocks=64 * 1260 + 1,
    ) as live:
        with live.client() as c:
            r = c.post("/api/requests", json={"prompt_len": 32, "max_tokens": 20000, "count": 64})
            assert r.status_code == 201, r.text
        time.sleep(SETTLE_S)
        yield live


async def main() -> int:
    with _loaded_server() as live:
        base = await _steps_per_s(live.url)

    with _loaded_server() as live:
        stop = asyncio.Event()
        latencies: list[float] = []
        counts: list[int] = []
        tasks = [
            asyncio.create_task(_client(live.ws_url, stop, latencies, counts))
            for _ in range(CLIENTS)
        ]
        await asyncio.sleep(1.0)
        latencies.clear()
        t0 = time.monotonic()
        with_clients = await _steps_per_s(live.url)
        elapsed = time.monotonic() - t0
        stop.set()
        await asyncio.gather(*tasks)
        frames_per_s = sum(counts) / elapsed / CLIENTS

    with _loaded_server() as live:
        sock = _stalled(int(live.url.rsplit(":", 1)[1]))
        await asyncio.sleep(1.0)
        stalled = await _steps_per_s(live.url)
        sock.close()

    lat = sorted(latencies)
    p99 = lat[int(0.99 * (len(lat) - 1))] * 1e3 if lat else float("nan")
    p50 = statistics.median(lat) * 1e3 if lat else float("nan")
    print("live path: SimRunner at full speed, 64 running decodes")
    print(f"  engine steps/s, 0 clients          {base:9.1f}")
    print(
        f"  engine steps/s, {CLIENTS} clients         {with_clients:9.1f}  "
        f"ratio {with_clients / base:5.2f}  (target >= 0.95)"
    )
    print(
        f"  engine steps/s, 1 stalled client   {stalled:9.1f}  "
        f"ratio {stalled / base:5.2f}  (target >= 0.95)"
    )
    print(f"  frames/s delivered per client      {frames_per_s:9.1f}")
    print(f"  delivery latency p50 / p99         {p50:7.1f} / {p99:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
