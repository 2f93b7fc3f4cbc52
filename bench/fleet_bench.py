"""The fleet bus under load: a `nats-server -js` of its own, a `serve --no-engine --bus`
dashboard, and tools/fleet_load.py publishing per-step summaries for many simulated nodes
(plus real full-detail `engine --bus --detail always` nodes). For a baseline of 10 nodes
and the full fleet (1,000 by default), measured in the same run, prints: steps/s and
messages/s published, steps/s and frames/s the dashboard took from the bus, the
dashboard's CPU (share of one core) and memory (RSS), and the end-to-end lag p50/p99 (a
step leaving its engine to the dashboard folding its summary).

Run: `python -m bench.fleet_bench [--nodes 1000] [--seconds 30] [--detail-nodes 2]`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from tests.app.bus import fleet_procs as fp
from tests.conftest import free_port
from tools import fleet_load


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def phase(
    tmp: Path, name: str, nodes: int, seconds: float, detail: int, procs: int
) -> dict[str, Any]:
    """One run on a fresh bus (its own store), so no phase sees another's backlog."""
    bus = fp.NatsServer(tmp / f"js-{name}")
    port = free_port()
    dash = fp.dashboard(port, f"sqlite:///{tmp}/{name}.db", bus.url, name, tmp / f"{name}.log")
    full = fleet_load.detail_nodes(bus.url, detail, tmp)
    try:
        time.sleep(2.0)
        cpu0, t0 = _cpu_s(dash.pid), time.monotonic()
        load = fleet_load.run(bus.url, nodes, seconds, procs)
        cpu = (_cpu_s(dash.pid) - cpu0) / (time.monotonic() - t0)
        page = httpx.get(f"http://127.0.0.1:{port}/api/fleet", timeout=30).json()
        bus_view = page["bus"]
        return {
            **load,
            "seen_nodes": bus_view["nodes"],
            "dash_steps": bus_view["steps"],
            "dash_frames": bus_view["frames"],
            "dash_cpu": cpu,
            "dash_rss_mb": _rss_mb(dash.pid),
            "lag_p50_ms": bus_view["lag_p50_ms"],
            "lag_p99_ms": bus_view["lag_p99_ms"],
            "seconds": seconds,
        }
    finally:
        for proc in full:
            fp.stop(proc)
        fp.stop(dash)
        bus.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--detail-nodes", type=int, default=2)
    ap.add_argument("--procs", type=int, default=2, help="load-generator processes")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as d:
        tmp = Path(d)
        base = phase(tmp, "base", 10, args.seconds, args.detail_nodes, 1)
        fleet = phase(tmp, "fleet", args.nodes, args.seconds, args.detail_nodes, args.procs)
    print(f"fleet bus ({args.seconds:g} s per phase, {args.detail_nodes} full-detail nodes each)")
    head = (
        f"{'nodes':>6} {'steps/s pub':>12} {'msgs/s pub':>11} {'steps/s dash':>13} "
        f"{'frames/s dash':>14} {'dash CPU':>9} {'dash RSS':>9} {'lag p50':>8} {'lag p99':>8}"
    )
    print(head)
    for r in (base, fleet):
        took = r["dash_steps"] / r["seconds"]
        frames = r["dash_frames"] / r["seconds"]
        print(
            f"{r['nodes']:>6} {r['steps_per_s']:>12.0f} {r['messages_per_s']:>11.0f} "
            f"{took:>13.0f} {frames:>14.0f} {r['dash_cpu'] * 100:>8.0f}% "
            f"{r['dash_rss_mb']:>7.0f}MB {r['lag_p50_ms']:>6.0f}ms {r['lag_p99_ms']:>6.0f}ms"
        )
    print(
        f"ratios fleet/base: steps {fleet['steps_per_s'] / max(base['steps_per_s'], 1):.1f}x, "
        f"dashboard CPU {fleet['dash_cpu'] / max(base['dash_cpu'], 1e-3):.1f}x, "
        f"RSS {fleet['dash_rss_mb'] / max(base['dash_rss_mb'], 1):.2f}x, "
        f"lag p99 {fleet['lag_p99_ms'] / max(base['lag_p99_ms'], 1):.1f}x; "
        f"nodes seen {fleet['seen_nodes']}/{args.nodes + args.detail_nodes}"
    )


if __name__ == "__main__":
    main()
