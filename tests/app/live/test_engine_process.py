"""The local engine runs in its own process, supervised by the dashboard (a real
`batchscope serve` process group, a real engine child, real signals): a SIGKILLed engine is
shown as exited, its recording holds every frame the dashboard had, a fresh engine session
starts within seconds, and no engine process outlives the dashboard."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import websockets

from tests.app.process_group import serve
from tests.app.records.helpers import recorded as stored
from tests.conftest import free_port


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _engine(base: str) -> dict:
    r = httpx.get(base + "/api/engine", timeout=10)
    assert r.status_code == 200, r.text
    body: dict = r.json()
    return body


def _wait_for(check, seconds: float) -> float:  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if check():
            return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds} s")


async def _view(port: int, kill_after: float, pid: int) -> tuple[str, set[int], dict]:
    """Follow the live session; SIGKILL the engine `pid` after `kill_after` s; read until
    the exit is announced: (session, seqs received, the engine_exit data)."""
    seqs: set[int] = set()
    session, exit_data = "", {}
    async with websockets.connect(f"ws://127.0.0.1:{port}/ws/live", max_size=None) as ws:
        await ws.send(json.dumps({"type": "hello", "session": None}))
        t0 = time.monotonic()
        killed = False
        while not exit_data:
            if not killed and time.monotonic() - t0 > kill_after:
                os.kill(pid, signal.SIGKILL)
                killed = True
            msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
            for f in msg if isinstance(msg, list) else [msg]:
                if f["type"] == "snapshot":
                    session = session or f["session"]
                    continue
                if f.get("session") != session or not f.get("seq"):
                    continue
                seqs.add(f["seq"])
                if f["type"] == "session" and f["data"].get("event") == "engine_exit":
                    exit_data = f["data"]
    return session, seqs, exit_data


def test_a_killed_engine_is_shown_recorded_whole_and_replaced(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rec.db'}"
    port = free_port()
    proc = serve(url, port)
    base = f"http://127.0.0.1:{port}"
    try:
        first = _engine(base)
        assert first["state"] == "running" and first["pid"] and first["session"]
        child = first["pid"]
        session, seqs, exit_data = asyncio.run(_view(port, 2.0, child))
        killed_at = time.monotonic()
        assert session == first["session"]
        assert exit_data["signal"] == "SIGKILL" and exit_data["code"] == -9
        # A fresh engine process, a new session, within 5 s of the kill.
        took = _wait_for(
            lambda: (
                (e := _engine(base))["state"] == "running" and e["session"] not in (None, session)
            ),
            5.0,
        )
        now = _engine(base)
        assert now["pid"] != child and now["restarts"] == 1
        assert now["last_exit"]["signal"] == "SIGKILL"
        assert time.monotonic() - killed_at < 5.0, took
        # The page says so (the controls panel the dashboard swaps in on a new session).
        panel = httpx.get(base + "/panels/controls", timeout=10).text
        assert "killed by SIGKILL" in panel and f"process {child} exited" in panel
        assert httpx.get(base + "/healthz", timeout=10).status_code == 200
        assert not _alive(child)
        second = now["pid"]
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    # Every frame the dashboard had of the killed session is recorded, without a hole.
    stored_seqs, rec = stored(url, session)
    assert seqs <= set(stored_seqs)
    assert stored_seqs == list(range(1, len(stored_seqs) + 1))
    assert rec is not None and rec.ended_at is not None
    # Nothing is left behind.
    assert not _alive(second)


def test_a_killed_dashboard_takes_its_engine_with_it(tmp_path: Path) -> None:
    port = free_port()
    proc = serve(f"sqlite:///{tmp_path / 'rec.db'}", port)
    try:
        child = _engine(f"http://127.0.0.1:{port}")["pid"]
        assert _alive(child)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    _wait_for(lambda: not _alive(child), 5.0)


def test_ctrl_c_stops_the_engine_in_order(tmp_path: Path) -> None:
    port = free_port()
    proc = serve(f"sqlite:///{tmp_path / 'rec.db'}", port)
    base = f"http://127.0.0.1:{port}"
    child = _engine(base)["pid"]
    time.sleep(2.0)  # running, as a user's session would be
    os.killpg(proc.pid, signal.SIGINT)  # the terminal's foreground group: not the engine's
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(30)
    out = proc.stdout.read() if proc.stdout else ""
    assert proc.returncode is not None, out
    assert not _alive(child)
    assert "Traceback" not in out, out
