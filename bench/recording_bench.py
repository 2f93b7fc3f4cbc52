"""Recording benchmarks, on a SQLite file and on PostgreSQL (127.0.0.1:5432, skipped with a
message when unreachable):

(a) recording throughput: iteration frames with 64 scheduled members each, written through
    app.db.writes.write_batch in recorder-sized transactions (iterations/s);
(b) engine steps/s with recording on vs off: SimRunner at full speed in its own thread,
    HubSink -> hub on an asyncio loop, with / without a Recorder listening (target >= 0.95;
    --seqs running at once, 64 by default: --seqs 256 is the issue's flat-out engine);
(c) seek latency (state_at_step at random steps) on a 100k-step recording (target <= 100 ms).
    The recording is generated into SQLite, then exported and imported into PostgreSQL.

    python -m bench.recording_bench [--seek-steps 100000] [--samples 200] [--seqs 256]
        [--only a,b,c]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import queries
from app.db.migrate import upgrade
from app.db.models import CheckpointRecord
from app.db.session import make_engine, make_sessionmaker
from app.db.writes import Frame, write_batch
from app.live.hub import EventHub
from app.records.export import export_jsonl
from app.records.importer import import_jsonl
from app.records.recorder import Recorder
from bench.hub_sink import HubSink
from bench.recording_workload import Workload, open_session, run_steps
from tests.app.records.helpers import HubPublisher

PG_ADMIN = os.environ.get(
    "BATCHSCOPE_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)
BATCH_FRAMES = 2000
"""Frames per transaction in (a): about what the recorder collects in one 0.5 s flush."""


# ------------------------------------------------------------------ databases
class Databases:
    """Fresh migrated databases: SQLite files in a temp dir, PostgreSQL `bs_bench_*`."""

    def __init__(self) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="bs-bench-")
        self.pg_names: list[str] = []
        self.pg_error: str | None = None
        try:
            import psycopg

            with psycopg.connect(PG_ADMIN, connect_timeout=3):
                pass
        except Exception as exc:
            self.pg_error = f"PostgreSQL unreachable at {PG_ADMIN}: {exc}"

    def backends(self) -> list[str]:
        return ["sqlite"] + ([] if self.pg_error else ["postgresql"])

    def new(self, backend: str) -> str:
        if backend == "sqlite":
            url = f"sqlite:///{Path(self.tmp.name) / (uuid.uuid4().hex[:8] + '.db')}"
        else:
            import psycopg

            name = "bs_bench_" + uuid.uuid4().hex[:10]
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name}")
            self.pg_names.append(name)
            url = PG_ADMIN.rsplit("/", 1)[0] + "/" + name
        upgrade(url)
        return url

    def close(self) -> None:
        if self.pg_names:
            import psycopg

            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                for name in self.pg_names:
                    conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        self.tmp.cleanup()


def sessions_for(url: str) -> sessionmaker[Session]:
    return make_sessionmaker(make_engine(url))


# ------------------------------------------------------------ (a) throughput
def write_throughput(dbs: Databases, steps: int = 4000) -> None:
    print(f"\n(a) recording throughput: write_batch, {BATCH_FRAMES} frames per transaction")
    frames: list[Frame] = []
    hub = EventHub()
    hub.add_listener(lambda *frame: frames.append(Frame(*frame)))
    workload = Workload.full_decode(64, steps)
    session = open_session(hub, "throughput", workload)
    run_steps(HubPublisher(hub, session), workload, steps)
    iterations = [f for f in frames if f[1] == "iteration"]
    members = statistics.mean(len(f[3]["scheduled"]) for f in iterations)
    size = statistics.mean(len(f[4]) for f in iterations)
    print(
        f"    {len(iterations)} iterations ({members:.0f} members each, {size:.0f} B), "
        f"{len(frames) - len(iterations)} other frames"
    )
    for backend in dbs.backends():
        sessions = sessions_for(dbs.new(backend))
        t0 = time.perf_counter()
        for i in range(0, len(frames), BATCH_FRAMES):
            with sessions.begin() as db:
                write_batch(db, frames[i : i + BATCH_FRAMES], [])
        elapsed = time.perf_counter() - t0
        print(
            f"    {backend:<10} {len(iterations) / elapsed:>9,.0f} iterations/s "
            f"({len(frames) / elapsed:,.0f} frames/s)"
        )


# ---------------------------------------------------------- (b) on vs off
async def _engine_rate(url: str | None, steps: int, seqs: int) -> tuple[float, int, float]:
    """Engine steps/s in its own thread; with `url`, a Recorder listens and writes there."""
    hub = EventHub()
    recorder = Recorder(hub, sessions_for(url), database_url=url) if url else None
    if recorder:
        recorder.start()
    workload = Workload.busy(seqs)
    session = open_session(hub, "on" if url else "off", workload)
    sink = HubSink(hub, asyncio.get_running_loop(), session)
    done = threading.Event()
    elapsed: list[float] = []

    def run() -> None:
        t0 = time.perf_counter()
        run_steps(sink, workload, steps)
        elapsed.append(time.perf_counter() - t0)
        done.set()

    thread = threading.Thread(target=run)
    thread.start()
    max_lag = 0
    while not done.is_set():
        await asyncio.sleep(0.05)
        max_lag = max(max_lag, recorder.lag if recorder else 0)
    thread.join()
    await asyncio.sleep(0)  # run the hops the engine thread scheduled last
    t_drain = time.perf_counter()
    if recorder:
        # Wait for every frame to be written before stopping: stopping mid-write races
        # (see tests/app/records/test_recorder_stop.py).
        published = hub.sessions[session].fold.seq
        while recorder.written < published and recorder.failures == 0:
            await asyncio.sleep(0.01)
        drained = time.perf_counter() - t_drain
        await recorder.stop()
        assert recorder.lag == 0 and recorder.failures == 0, recorder.last_error
    else:
        drained = 0.0
    return steps / elapsed[0], max_lag, drained


def recording_overhead(dbs: Databases, seqs: int, steps: int = 4000, rounds: int = 3) -> None:
    print(
        f"\n(b) engine steps/s, recording on vs off (SimRunner full speed, {seqs} seqs, "
        f"{steps} steps, median of {rounds})"
    )
    off_rates = [asyncio.run(_engine_rate(None, steps, seqs))[0] for _ in range(rounds)]
    off = statistics.median(off_rates)
    print(f"    off        {off:>9,.0f} steps/s")
    for backend in dbs.backends():
        results = [asyncio.run(_engine_rate(dbs.new(backend), steps, seqs)) for _ in range(rounds)]
        on = statistics.median(r[0] for r in results)
        lag, drain = max(r[1] for r in results), max(r[2] for r in results)
        verdict = "yes" if on / off >= 0.95 else "NO"
        print(
            f"    on {backend:<7} {on:>9,.0f} steps/s  ratio {on / off:.3f} "
            f"(target >= 0.95: {verdict}); max lag {lag} frames, drained {drain:.2f}s after"
        )


# ------------------------------------------------------------------ (c) seek
def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def _seek(
    sessions: sessionmaker[Session], sid: str, steps: int, samples: int, budget_s: float = 90.0
) -> list[float]:
    """state_at_step at random steps: `samples` of them, or as many as fit in `budget_s`."""
    import random

    rng = random.Random(7)
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    with sessions() as db:
        while len(times) < samples and time.perf_counter() < deadline:
            step = rng.randrange(steps)
            t0 = time.perf_counter()
            state = queries.state_at_step(db, sid, step)
            times.append((time.perf_counter() - t0) * 1e3)
            assert state.step == step
    return times


def seek_latency(dbs: Databases, steps: int, samples: int) -> None:
    print(
        f"\n(c) seek latency: state_at_step at {samples} random steps of a {steps:,}-step "
        "recording (target p99 <= 100 ms)"
    )
    sqlite_url = dbs.new("sqlite")
    sessions = sessions_for(sqlite_url)
    t0 = time.perf_counter()
    sid, frames, checkpoints, biggest = record_steps_to_db(sessions, steps)
    gen = time.perf_counter() - t0
    print(
        f"    generated {steps:,} steps ({frames:,} frames, {checkpoints} checkpoints) "
        f"into SQLite in {gen:.1f}s ({steps / gen:,.0f} steps/s); "
        f"largest checkpoint {biggest / 1e6:.1f} MB"
    )
    seeks = {"sqlite": sessions}
    if not dbs.pg_error:
        buf = io.StringIO()
        with sessions() as db:
            export_jsonl(db, sid, buf)
        path = Path(dbs.tmp.name) / "long.jsonl"
        path.write_text(buf.getvalue(), encoding="utf-8")
        pg = sessions_for(dbs.new("postgresql"))
        t0 = time.perf_counter()
        import_jsonl(pg, path)
        took = time.perf_counter() - t0
        print(
            f"    export -> import into PostgreSQL: {path.stat().st_size / 1e6:.0f} MB, "
            f"import {took:.1f}s ({frames / took:,.0f} frames/s)"
        )
        seeks["postgresql"] = pg
    for backend, s in seeks.items():
        times = _seek(s, sid, steps, samples)
        p50, p99 = _percentile(times, 0.5), _percentile(times, 0.99)
        verdict = "yes" if p99 <= 100 else "NO"
        print(
            f"    {backend:<10} p50 {p50:6.1f} ms  p99 {p99:6.1f} ms  max {max(times):6.1f} ms "
            f"over {len(times)} seeks "
            f"(target: {verdict})"
        )


def record_steps_to_db(sessions: sessionmaker[Session], steps: int) -> tuple[str, int, int, int]:
    """Record in one thread: a Recorder's on_frame buffers frames, and every 5,000 steps
    its buffer goes through the recorder's Writer (which folds and checkpoints)."""
    hub = EventHub()
    recorder = Recorder(hub, sessions)
    counts = [0, 0, 0]

    def flush() -> None:
        batch, recorder.pending = recorder.pending, []
        counts[0] += len(batch)
        recorder._local.write(batch)

    workload = Workload.steady()
    session = open_session(hub, "seek", workload)
    run_steps(HubPublisher(hub, session), workload, steps, every=5000, on_every=flush)
    hub.close_session(session)
    flush()
    with sessions() as db:
        rows = db.execute(
            select(func.count(), func.max(func.length(CheckpointRecord.state))).where(
                CheckpointRecord.session_id == session
            )
        ).one()
    counts[1], counts[2] = int(rows[0]), int(rows[1] or 0)
    return session, counts[0], counts[1], counts[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seek-steps", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--seqs", type=int, default=64, help="running at once in (b)")
    parser.add_argument("--only", default="a,b,c", help="which parts, e.g. b")
    args = parser.parse_args()
    only = set(args.only.split(","))
    dbs = Databases()
    if dbs.pg_error:
        print(f"note: {dbs.pg_error}; PostgreSQL figures skipped", file=sys.stderr)
    try:
        if "a" in only:
            write_throughput(dbs)
        if "b" in only:
            recording_overhead(dbs, args.seqs)
        if "c" in only:
            seek_latency(dbs, args.seek_steps, args.samples)
    finally:
        dbs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
