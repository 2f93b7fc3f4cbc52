"""Fault and soak bench (issue 12): real `batchscope serve` processes in their own process
groups, SQLite files and the PostgreSQL server on 127.0.0.1:5432 (skipped with a message
when unreachable). Prints:

  frames lost on SIGINT and on SIGKILL (frames a viewer saw that the recording lacks);
  seconds a slow viewer (120 KB/s link, answering pings) stays stale;
  relay recovery time after a PostgreSQL outage (every backend terminated);
  MB/min stored at 30 req/s (target <= 15) and seek p99 on that recording (target <= 100 ms);
  RSS of the server over the soak (web process + writer process).

    python -m bench.fault_bench [--soak-minutes 2]   (10 for the long soak)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import websockets

from app.db import queries
from app.db.migrate import upgrade
from app.db.retention import stored_bytes
from app.db.session import make_engine, make_sessionmaker
from bench.slow_client import slow_viewer
from tests.app.process_group import serve, stop, watch
from tests.app.records.helpers import recorded
from tests.conftest import _pg_available, free_port, fresh_pg_database, terminate_backends

RATE = 30.0


# ------------------------------------------------------------------- signals
def signal_loss(tmp: Path, sig: int, name: str) -> None:
    url = f"sqlite:///{tmp / (name + '.db')}"
    upgrade(url)
    port = free_port()
    proc = serve(url, port, RATE)
    session, seen, fps = asyncio.run(watch(port, 8.0, kill=(proc.pid, sig)))
    stop(proc, sig)
    time.sleep(1.0)  # after SIGKILL, the orphaned writer finishes its batch and exits
    seqs, _ = recorded(url, session)
    holes = len(seqs) != (seqs[-1] if seqs else 0)
    lost = max(0, seen - len(seqs))
    seconds = lost / max(fps, 1e-9)
    print(
        f"    {name:<8} frames lost {lost:>5} of {seen} a viewer saw "
        f"({seconds:.2f} s at {fps:.0f} frames/s); holes: {'YES' if holes else 'none'}"
    )


# ------------------------------------------------------------------ slow viewer
def slow_client(tmp: Path) -> None:
    url = f"sqlite:///{tmp / 'slow.db'}"
    upgrade(url)
    port = free_port()
    proc = serve(url, port, RATE)
    try:
        view = asyncio.run(slow_viewer(f"ws://127.0.0.1:{port}", 25.0, 120_000))
    finally:
        stop(proc)
    late = sorted(age for at, age in view.staleness if at > 5.0)
    rate = view.bytes_read / 25.0 / 1e3
    if not late:
        print("    slow viewer: saw nothing after the warm-up")
        return
    p50, p99 = late[len(late) // 2], late[min(len(late) - 1, int(0.99 * len(late)))]
    print(
        f"    slow viewer (link 120 KB/s, read {rate:.0f} KB/s): stale p50 {p50:.2f} s, "
        f"p99 {p99:.2f} s, max {late[-1]:.2f} s; {view.gaps} gaps, snapshots "
        f"{max(view.snapshot_bytes) / 1e3:.0f} KB at most"
    )


# ------------------------------------------------------------------- relay outage
def relay_outage() -> None:
    if not _pg_available():
        print("    relay outage: skipped (PostgreSQL not reachable on 127.0.0.1:5432)")
        return
    with fresh_pg_database() as url:
        upgrade(url)
        obs_port, org_port = free_port(), free_port()
        observer = serve(url, obs_port, RATE, engine=False)
        origin = serve(url, org_port, RATE)
        try:

            async def run() -> float | None:
                async with websockets.connect(
                    f"ws://127.0.0.1:{obs_port}/ws/live", max_size=None
                ) as ws:
                    await ws.send(json.dumps({"type": "hello", "session": None}))
                    end = time.monotonic() + 4
                    while time.monotonic() < end:
                        await ws.recv()
                    terminate_backends(url)
                    t0 = time.time()
                    deadline = time.monotonic() + 30
                    while time.monotonic() < deadline:
                        msg = json.loads(await asyncio.wait_for(ws.recv(), 30))
                        for f in msg if isinstance(msg, list) else [msg]:
                            if f.get("type") == "iteration" and f.get("ts", 0) > t0:
                                return time.time() - t0
                    return None

            took = asyncio.run(run())
            health = httpx.get(f"http://127.0.0.1:{org_port}/healthz").json()["checks"]["relay"][
                "info"
            ]
        finally:
            stop(origin)
            stop(observer)
    shown = "never (30 s)" if took is None else f"{took:.2f} s"
    print(
        f"    relay recovery after terminating every backend: {shown} until a viewer of the "
        f"other dashboard got a new frame; reconnects {health['reconnects']}, "
        f"dropped {health['dropped']}"
    )


# --------------------------------------------------------------------- soak
def rss_kb(pid: int) -> int:
    total = 0
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def soak(tmp: Path, minutes: float) -> None:
    path = tmp / "soak.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    port = free_port()
    proc = serve(url, port, RATE)
    samples: list[tuple[float, int]] = []
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < minutes * 60:
            samples.append((time.monotonic() - t0, rss_kb(proc.pid)))
            time.sleep(5)
        state = httpx.get(f"http://127.0.0.1:{port}/api/state").json()
    finally:
        stop(proc)
    elapsed = (time.monotonic() - t0) / 60
    engine = make_engine(url)
    sessions = make_sessionmaker(engine)
    with sessions() as db:
        stored = sum(stored_bytes(db).values())
        sid = state["session"]
        steps = queries.get_session(db, sid)["steps"]
    file_mb = sum(p.stat().st_size for p in tmp.glob("soak.db*")) / 1e6
    mb_min = stored / 1e6 / elapsed
    print(
        f"    {elapsed:.1f} min at {RATE:.0f} req/s: {steps:,} steps; recordings store "
        f"{stored / 1e6:.1f} MB = {mb_min:.1f} MB/min (target <= 15: "
        f"{'yes' if mb_min <= 15 else 'NO'}); SQLite file {file_mb:.1f} MB = "
        f"{file_mb / elapsed:.1f} MB/min"
    )
    rng = random.Random(3)
    times, cpu = [], []
    with sessions() as db:
        for _ in range(200):
            step = rng.randrange(steps)
            t, c = time.perf_counter(), time.process_time()
            queries.state_at_step(db, sid, step)
            times.append((time.perf_counter() - t) * 1e3)
            cpu.append((time.process_time() - c) * 1e3)
    engine.dispose()
    times.sort()
    cpu.sort()
    p99, cpu99 = times[int(0.99 * (len(times) - 1))], cpu[int(0.99 * (len(cpu) - 1))]
    print(
        f"    seek on it: p50 {statistics.median(times):.1f} ms, p99 {p99:.1f} ms "
        f"(target <= 100: {'yes' if p99 <= 100 else 'NO'}); CPU p99 {cpu99:.1f} ms; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    rss = [kb / 1024 for _, kb in samples]
    print(
        f"    RSS (web + writer): start {rss[0]:.0f} MB, after 1 min "
        f"{rss[min(len(rss) - 1, 12)]:.0f} MB, end {rss[-1]:.0f} MB, max {max(rss):.0f} MB"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--soak-minutes", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bs-fault-") as d:
        tmp = Path(d)
        print("\n(a) signals to the server's process group (SQLite, 30 req/s)")
        signal_loss(tmp, signal.SIGINT, "SIGINT")
        signal_loss(tmp, signal.SIGTERM, "SIGTERM")
        signal_loss(tmp, signal.SIGKILL, "SIGKILL")
        print("\n(b) a slow viewer")
        slow_client(tmp)
        print("\n(c) PostgreSQL outage under the relay")
        relay_outage()
        print(f"\n(d) soak: {args.soak_minutes:g} min at {RATE:.0f} req/s (SQLite)")
        soak(tmp, args.soak_minutes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
