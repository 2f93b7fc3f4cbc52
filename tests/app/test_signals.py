"""Signals sent to a real `batchscope serve` process group (what a terminal's Ctrl-C and
systemd do): SIGINT and SIGTERM shut down in order and lose no frame a viewer saw; after
SIGKILL the next start marks the orphaned session ended and says what it covers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
import websockets
from sqlalchemy import select

from app.db.migrate import upgrade
from app.db.models import EventRecord, IterationRecord, SessionRecord
from app.db.session import make_engine, make_sessionmaker
from tests.conftest import ROOT, TOKEN, free_port


def serve(url: str, port: int, rate: float = 40.0) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--runner", "sim"]
    cmd += ["--workload", "poisson", "--token", TOKEN, "--database-url", url]
    env = {**os.environ, "BATCHSCOPE_WORKLOAD_RATE": str(rate)}
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start: " + (proc.stdout.read() if proc.stdout else ""))


async def watch(port: int, seconds: float, pid: int, sig: int) -> tuple[str, int, float]:
    """A viewer for `seconds`; then `sig` goes to the server's group and the viewer reads
    on until the server is gone: (session, last seq seen, frames per second seen)."""
    seen, count, session = 0, 0, ""
    async with websockets.connect(f"ws://127.0.0.1:{port}/ws/live", max_size=None) as ws:
        await ws.send(json.dumps({"type": "hello", "session": None}))
        t0 = time.monotonic()
        with contextlib.suppress(websockets.ConnectionClosed):
            while True:
                if seconds and time.monotonic() - t0 > seconds:
                    os.killpg(pid, sig)
                    seconds = 0
                msg = json.loads(await ws.recv())
                for f in msg if isinstance(msg, list) else [msg]:
                    if f.get("session") and f.get("seq"):
                        session, seen = f["session"], max(seen, f["seq"])
                        count += 1
    return session, seen, count / (time.monotonic() - t0)


def stored(url: str, session: str) -> tuple[list[int], SessionRecord | None]:
    engine = make_engine(url)
    try:
        with make_sessionmaker(engine)() as db:
            seqs = list(
                db.scalars(select(IterationRecord.seq).where(IterationRecord.session_id == session))
            )
            seqs += db.scalars(select(EventRecord.seq).where(EventRecord.session_id == session))
            rec = db.get(SessionRecord, session)
            return sorted(seqs), rec
    finally:
        engine.dispose()


@pytest.fixture
def migrated(database_url: str) -> Iterator[str]:
    upgrade(database_url)
    yield database_url


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_group_signal_shuts_down_in_order_and_loses_nothing(migrated: str, sig: int) -> None:
    port = free_port()
    proc = serve(migrated, port)
    try:
        session, seen, _ = asyncio.run(watch(port, 3.0, proc.pid, sig))
        proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    seqs, rec = stored(migrated, session)
    assert seen > 100
    assert seqs == list(range(1, len(seqs) + 1)), "holes in the recording"
    assert len(seqs) >= seen, f"frames a viewer saw were lost: {seen - len(seqs)}"
    assert rec is not None and rec.ended_at is not None and rec.end_reason == "closed"


def test_sigkill_loses_a_bounded_tail_and_the_next_start_marks_the_orphan(migrated: str) -> None:
    port = free_port()
    proc = serve(migrated, port)
    try:
        session, seen, per_s = asyncio.run(watch(port, 3.0, proc.pid, signal.SIGKILL))
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    time.sleep(1.0)  # the writer process, orphaned, finishes its batch and exits
    seqs, rec = stored(migrated, session)
    assert seqs == list(range(1, len(seqs) + 1)), "holes in the recording"
    assert rec is not None and rec.ended_at is None
    assert seen - len(seqs) <= 0.5 * per_s + 20, (seen, len(seqs), per_s)  # <= ~0.5 s lost
    again = serve(migrated, free_port(), rate=0.01)
    try:
        os.killpg(again.pid, signal.SIGINT)
        out, _ = again.communicate(timeout=60)
    finally:
        if again.poll() is None:
            os.killpg(again.pid, signal.SIGKILL)
    assert f"session {session} was left open" in out and "covers steps" in out, out
    _, rec = stored(migrated, session)
    assert rec is not None and rec.ended_at is not None and rec.end_reason == "orphaned"
