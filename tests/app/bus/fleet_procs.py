"""Real processes for the fleet bus: a nats-server with JetStream on its own port and store
directory (restartable), `serve --no-engine --bus` dashboards and `engine --bus` nodes, and
what a dashboard recorded of a session. Shared by tests/app/bus and bench/fleet_bench.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ROOT, TOKEN, free_port
from tests.lifeline import die_with_us

NATS_SERVER = "/usr/sbin/nats-server"


def _wait_port(port: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return True
        time.sleep(0.05)
    return False


class NatsServer:
    """`nats-server -js -p PORT -sd DIR`, stopped and started again on the same store."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        cmd = [NATS_SERVER, "-js", "-a", "127.0.0.1", "-p", str(self.port)]
        cmd += ["-sd", str(self.store)]
        log = open(self.store.parent / f"nats-{self.port}.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_us()
        )
        if not _wait_port(self.port, 30):
            self.proc.kill()
            raise RuntimeError("nats-server did not start")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def dashboard(
    port: int,
    db: str,
    bus: str,
    consumer: str,
    log: Path,
    env: dict[str, str] | None = None,
    engine: bool = False,
) -> subprocess.Popen[bytes]:
    """`serve --bus` (`--no-engine` unless `engine`: then its own sim engine with a Poisson
    workload, a node too)."""
    own = ["--runner", "sim", "--workload", "poisson"] if engine else ["--no-engine"]
    cmd = [sys.executable, "-m", "app.cli", "serve", *own, "--port", str(port)]
    cmd += ["--token", TOKEN, "--database-url", db, "--bus", bus]
    full_env = {**os.environ, "BATCHSCOPE_BUS_CONSUMER": consumer, **(env or {})}
    out = open(log, "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=full_env,
        start_new_session=True,  # its own group: with its recorder's writer process
        preexec_fn=die_with_us(),
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("dashboard did not start: " + log.read_text()[-2000:])


def node(
    bus: str, name: str, log: Path, *extra: str, rate: float = 20.0
) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "app.cli", "engine", "--bus", bus, "--node", name]
    cmd += ["--runner", "sim", "--workload", "poisson", *extra]
    env = {**os.environ, "BATCHSCOPE_WORKLOAD_RATE": str(rate)}
    out = open(log, "ab")  # noqa: SIM115
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_us()
    )


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """`sig` to the process (to its whole group for a dashboard); SIGKILL after 60 s."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        proc.wait()


def last_seq_of(log: Path) -> int:
    """The seq a stopped node says it ended at (its `stopped: last seq N` line)."""
    for line in reversed(log.read_text().splitlines()):
        if "stopped: last seq" in line:
            return int(line.split("last seq")[1].split(",")[0])
    raise AssertionError("the node did not say where it stopped:\n" + log.read_text()[-2000:])


def nodes(port: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = httpx.get(f"http://127.0.0.1:{port}/api/nodes", timeout=10).json()
    return got


def wait_for(pred: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if pred():
                return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def recorded_through(port: int, session: str) -> int:
    """The last seq the dashboard's recording of `session` holds."""
    r = httpx.get(f"http://127.0.0.1:{port}/api/sessions/{session}", timeout=10)
    return int(r.json().get("last_seq") or 0) if r.status_code == 200 else 0


def recorded(port: int, session: str) -> tuple[list[int], list[tuple[int, int]]]:
    """(seqs of the frames the dashboard recorded, (from, to) of every gap mark)."""
    r = httpx.get(f"http://127.0.0.1:{port}/api/sessions/{session}/export?format=jsonl", timeout=60)
    r.raise_for_status()
    seqs, gaps = [], []
    for line in r.text.splitlines()[1:]:
        frame = json.loads(line)
        data = frame.get("data") or {}
        if frame["type"] == "session" and data.get("event") == "gap":
            gaps.append((data["from_seq"], data["to_seq"]))
        else:
            seqs.append(frame["seq"])
    return seqs, gaps


def covered(seqs: list[int], gaps: list[tuple[int, int]], last: int) -> list[int]:
    """The seqs 1..last neither recorded nor inside a gap mark (should be none)."""
    have = set(seqs)
    for lo, hi in gaps:
        have.update(range(lo, hi + 1))
    return [s for s in range(1, last + 1) if s not in have]
