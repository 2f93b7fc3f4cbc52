"""Viewers for bench.live_bench, in a process of their own (so they never share a GIL
with the bench's probes): N websocket clients reading raw frames for S seconds.

    python -m bench.live_viewers WS_URL N SECONDS   -> prints one JSON line:
    {"messages_per_s": per client, "latency_p50_ms", "latency_p99_ms"}
Each message is a batch of frames, read raw; one in SAMPLE_EVERY is parsed for latency.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from typing import Any

import websockets

SAMPLE_EVERY = 20


async def _client(ws_url: str, seconds: float, latencies: list[float], counts: list[int]) -> None:
    async with websockets.connect(ws_url + "/ws/live", max_size=64 << 20) as ws:
        await ws.send(json.dumps({"type": "hello", "session": None, "last_seq": None}))
        await ws.recv()
        n = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                msg = await asyncio.wait_for(ws.recv(), 1.0)
            except TimeoutError:
                continue
            # Raw frames: counted, not parsed (a browser's cost is not this bench's to pay),
            # except pings to answer and one message in SAMPLE_EVERY for the latency.
            n += 1
            if '"type":"ping"' in msg or n % SAMPLE_EVERY == 0:
                now = time.time()
                frames: Any = json.loads(msg)
                for frame in frames if isinstance(frames, list) else [frames]:
                    if frame.get("type") == "ping":
                        await ws.send(json.dumps({"type": "pong", "id": frame["data"]["id"]}))
                    elif "ts" in frame:
                        latencies.append(now - frame["ts"])
        counts.append(n)


async def main(ws_url: str, clients: int, seconds: float) -> dict[str, float]:
    latencies: list[float] = []
    counts: list[int] = []
    await asyncio.gather(*(_client(ws_url, seconds, latencies, counts) for _ in range(clients)))
    lat = sorted(latencies)
    return {
        "messages_per_s": sum(counts) / seconds / max(clients, 1),
        "latency_p50_ms": statistics.median(lat) * 1e3 if lat else float("nan"),
        "latency_p99_ms": lat[int(0.99 * (len(lat) - 1))] * 1e3 if lat else float("nan"),
    }


if __name__ == "__main__":
    url, n, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    print(json.dumps(asyncio.run(main(url, n, secs))))
