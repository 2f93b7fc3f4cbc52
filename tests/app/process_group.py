"""A real `batchscope serve` in its own process group (as a terminal's foreground job, or a
systemd unit), stopped by a signal to the group, and a viewer that watches it until then.
Shared by tests/app/test_signals.py and bench/fault_bench.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import websockets

from tests.conftest import ROOT, TOKEN, wait_healthy
from tests.lifeline import die_with_us


def serve(url: str, port: int, rate: float = 40.0, engine: bool = True) -> subprocess.Popen[str]:
    """`serve` with a poisson workload at `rate` req/s recording to `url`; with
    `engine=False`, `--no-engine` (it only shows what other dashboards relay)."""
    cmd = [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--runner", "sim"]
    cmd += ["--workload", "poisson", "--token", TOKEN, "--database-url", url]
    if not engine:
        cmd.append("--no-engine")
    env = {**os.environ, "BATCHSCOPE_WORKLOAD_RATE": str(rate)}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # its own process group
        preexec_fn=die_with_us(),
    )  # fmt: skip
    if wait_healthy(proc, f"http://127.0.0.1:{port}", 60):
        return proc
    proc.kill()
    raise RuntimeError("server did not start: " + (proc.stdout.read() if proc.stdout else ""))


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGINT) -> None:
    """`sig` to the server's group (unless it is gone); SIGKILL if it is not gone in 60 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


async def watch(
    port: int,
    seconds: float,
    kill: tuple[int, int] | None = None,
    before_kill: Callable[[], None] | None = None,
) -> tuple[str, int, float]:
    """(session, last seq a viewer saw, frames/s it saw). With `kill` (pid, signal): the
    signal goes to the server's process group after `seconds` (`before_kill` called just
    before), and the viewer reads on until the server is gone, so that it has seen every
    frame published before the end."""
    seen, session, count = 0, "", 0
    async with websockets.connect(f"ws://127.0.0.1:{port}/ws/live", max_size=None) as ws:
        await ws.send(json.dumps({"type": "hello", "session": None}))
        end = time.monotonic() + seconds
        t0 = time.monotonic()
        with contextlib.suppress(websockets.ConnectionClosed):
            while True:
                if time.monotonic() >= end:
                    if kill is None:
                        break
                    if before_kill is not None:
                        before_kill()
                    os.killpg(kill[0], kill[1])
                    kill, end = None, float("inf")
                msg = json.loads(await ws.recv())
                for f in msg if isinstance(msg, list) else [msg]:
                    if f.get("session") and f.get("seq"):
                        session, seen = f["session"], max(seen, f["seq"])
                        count += 1
    return session, seen, count / (time.monotonic() - t0)
