"""Simulate a fleet on the bus: up to 1,000 nodes publishing per-step summaries at realistic
step rates (each node 15-60 ms a step, a random walk of load), from one or a few processes,
plus a few real `batchscope engine --bus --detail always` nodes for full detail.

    python tools/fleet_load.py --bus nats://127.0.0.1:4222 --nodes 1000 --seconds 60
    python tools/fleet_load.py ... --detail-nodes 2 --procs 2

Prints one JSON line at the end: nodes, steps and messages published, and their rates.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.bus.subjects import connect, ensure_streams  # noqa: E402
from protocol.bus import subject  # noqa: E402
from tests.lifeline import die_with_us  # noqa: E402

INTERVAL_S = 0.25
"""How often a node publishes its summaries (as `engine --bus` does)."""


class SimNode:
    """One simulated engine: steps at its own rate; load wanders; sometimes KV runs out."""

    def __init__(self, name: str, rng: random.Random) -> None:
        self.name = name
        self.session = f"sim-{name}"
        self.rng = rng
        self.step = 0
        self.step_s = rng.uniform(0.015, 0.060)
        self.owed = rng.uniform(0, INTERVAL_S)
        self.running = rng.randint(0, 64)
        self.waiting = rng.randint(0, 16)
        self.kv_total = 4096

    def steps(self, now: float, dt: float) -> list[list[float | int]]:
        self.owed += dt
        n = int(self.owed / self.step_s)
        self.owed -= n * self.step_s
        rows: list[list[float | int]] = []
        rnd = self.rng.random
        for i in range(n):
            self.step += 1
            r = rnd()  # one draw per step drives everything (cheap enough for 1,000 nodes)
            arrived = 1 if r < 0.3 else 0
            finished = 1 if self.running and 0.2 < r < 0.48 else 0
            self.waiting = max(0, self.waiting + arrived - (1 if r > 0.7 else 0))
            self.running = max(0, min(256, self.running + (1 if self.waiting else 0) - finished))
            kv_used = min(self.kv_total, self.running * 14 + int(r * 16))
            preempted = 1 if kv_used >= self.kv_total and r < 0.2 else 0
            prefill = int(r * 512) if self.waiting else 0
            stalled = 1 if self.waiting and not self.running and not prefill else 0
            t = now - (n - 1 - i) * self.step_s
            rows.append([
                self.step, round(t, 4), round(self.step_s * 1000, 3), self.running,
                self.waiting, self.running + (1 if prefill else 0), prefill, self.running,
                2048, kv_used, self.kv_total, int(r * 64), preempted, finished,
                arrived, stalled,
            ])  # fmt: skip
        return rows


async def _publish(bus: str, names: list[str], seconds: float, seed: int) -> dict[str, Any]:
    nc = await connect(bus, f"fleet-load-{os.getpid()}")
    await ensure_streams(nc.jetstream(), 3600.0, 1 << 30)
    rng = random.Random(seed)
    nodes = [SimNode(n, rng) for n in names]
    subjects = [subject(n.name, "summary") for n in nodes]
    steps = msgs = 0
    start = last = time.monotonic()
    while last - start < seconds:
        await asyncio.sleep(INTERVAL_S)
        mono = time.monotonic()
        dt, last = mono - last, mono
        for node, subj in zip(nodes, subjects, strict=True):
            rows = node.steps(time.time(), dt)
            body = {"node": node.name, "session": node.session, "seq": 0, "steps": rows}
            await nc.publish(subj, json.dumps(body, separators=(",", ":")).encode())
            steps += len(rows)
            msgs += 1
            if msgs % 50 == 0:
                await asyncio.sleep(0)  # let the client's flusher send what is buffered
        await nc.flush()
    await nc.drain()
    return {"steps": steps, "messages": msgs, "seconds": time.monotonic() - start}


def _worker(bus: str, names: list[str], seconds: float, seed: int, out: Any) -> None:
    out.put(asyncio.run(_publish(bus, names, seconds, seed)))


def detail_nodes(bus: str, count: int, log_dir: Path) -> list[subprocess.Popen[bytes]]:
    """`count` real engines with full detail always (sim runner, a steady workload)."""
    procs = []
    for i in range(count):
        cmd = [sys.executable, "-m", "app.cli", "engine", "--bus", bus, "--node", f"full-{i}"]
        cmd += ["--runner", "sim", "--workload", "poisson", "--detail", "always"]
        env = {**os.environ, "BATCHSCOPE_WORKLOAD_RATE": "10", "PYTHONPATH": str(ROOT)}
        log = open(log_dir / f"full-{i}.log", "ab")  # noqa: SIM115
        procs.append(
            subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdout=log, stderr=log, preexec_fn=die_with_us()
            )
        )
    return procs


def run(bus: str, nodes: int, seconds: float, procs: int = 1, seed: int = 1) -> dict[str, Any]:
    """Publish summaries for `nodes` simulated nodes for `seconds`; totals and rates."""
    names = [f"sim-{i:04d}" for i in range(nodes)]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    workers = [
        ctx.Process(target=_worker, args=(bus, names[i::procs], seconds, seed + i, out))
        for i in range(procs)
    ]
    for w in workers:
        w.start()
    parts = [out.get(timeout=seconds + 120) for _ in workers]
    for w in workers:
        w.join(30)
    steps = sum(p["steps"] for p in parts)
    msgs = sum(p["messages"] for p in parts)
    span = max(p["seconds"] for p in parts)
    return {
        "nodes": nodes,
        "steps": steps,
        "messages": msgs,
        "steps_per_s": round(steps / span, 1),
        "messages_per_s": round(msgs / span, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bus", default="nats://127.0.0.1:4222")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--procs", type=int, default=1, help="publishing processes")
    ap.add_argument("--detail-nodes", type=int, default=0, help="real full-detail engines")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if not 1 <= args.nodes <= 5000 or not 1 <= args.procs <= 16 or args.seconds <= 0:
        print("fleet_load: --nodes 1-5000, --procs 1-16, --seconds > 0", file=sys.stderr)
        return 2
    full = detail_nodes(args.bus, args.detail_nodes, Path.cwd())
    try:
        result = run(args.bus, args.nodes, args.seconds, args.procs, args.seed)
    finally:
        for proc in full:
            proc.terminate()
            proc.wait(30)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
