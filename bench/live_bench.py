"""Live path: engine process (SimRunner, full speed) -> link -> hub -> websocket viewers.

Prints engine steps/s with 0 viewers, 10 viewers (reading raw frames in a process of their
own: bench.live_viewers) and one stalled viewer, with the ratios against the 0-viewer
baseline measured in the same run (target >= 0.95); frames/s and delivery latency per
viewer; and the latency of GET /api/state polled every 100 ms while the engine runs flat
out, without and with the 10 viewers (target p99 <= 50 ms).

Run: `python -m bench.live_bench` (starts `batchscope serve` in a subprocess).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.conftest import LiveServer, server_process
from tests.lifeline import die_with_us

WINDOW_S = 6.0
SETTLE_S = 2.0
CLIENTS = 10
STATE_POLL_S = 0.1


def _step(url: str, own: bool = False) -> int:
    """The engine's latest step the dashboard has (flat out, its lag is bounded: see
    engine_host), or with `own` the engine's own count (reported every 0.25 s)."""
    step: int = httpx.get(url + "/api/engine", timeout=10).json()["engine_step" if own else "step"]
    return step


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used (/proc, Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _steps_per_s(url: str, seconds: float = WINDOW_S, own: bool = False) -> tuple[float, float]:
    """(engine steps/s, the engine process's CPU ms per step) over `seconds`."""
    pid = httpx.get(url + "/api/engine", timeout=10).json()["pid"]
    s0, c0, t0 = _step(url, own), _cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    steps = _step(url, own) - s0
    cpu_ms = (_cpu_s(pid) - c0) * 1e3 / max(steps, 1)
    return steps / (time.monotonic() - t0), cpu_ms


def _state_latencies(url: str, seconds: float) -> list[float]:
    """GET /api/state every STATE_POLL_S for `seconds`: each answer's latency (s)."""
    out: list[float] = []
    end = time.monotonic() + seconds
    with httpx.Client(timeout=30) as c:
        while time.monotonic() < end:
            t0 = time.monotonic()
            r = c.get(url + "/api/state")
            out.append(time.monotonic() - t0)
            assert r.status_code == 200, r.text
            time.sleep(STATE_POLL_S)
    return out


def _stalled(port: int) -> socket.socket:
    """A client that says hello and never reads again."""
    from tests.app.routes.test_ws import _raw_ws_hello

    return _raw_ws_hello(port)


@contextlib.contextmanager
def _loaded_server(paced: bool = False) -> Iterator[LiveServer]:
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
    pace = {"realtime": "true", "sim_speed": 1000} if paced else {"realtime": "false"}
    with server_process(
        database_url=db_url,
        **pace,
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


def _viewers(ws_url: str, seconds: float) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "bench.live_viewers", ws_url, str(CLIENTS), str(seconds)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, preexec_fn=die_with_us())


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] * 1e3 if ordered else float("nan")


def main() -> int:
    with _loaded_server() as live:
        base, base_cpu = _steps_per_s(live.url)
        idle_state = _state_latencies(live.url, 3.0)

    with _loaded_server() as live:
        viewers = _viewers(live.ws_url, WINDOW_S * 2 + 2.0)
        time.sleep(1.0)
        with_clients, clients_cpu = _steps_per_s(live.url)
        state = _state_latencies(live.url, WINDOW_S)
        out, _ = viewers.communicate(timeout=60)
        seen = json.loads(out.strip().splitlines()[-1])

    with _loaded_server() as live:
        sock = _stalled(int(live.url.rsplit(":", 1)[1]))
        time.sleep(1.0)
        stalled, stalled_cpu = _steps_per_s(live.url)
        sock.close()

    # The same with an engine that has a pace of its own (the simulated model at 1000x:
    # as fast as it goes, but it never waits for the dashboard; what the dashboard cannot
    # take is dropped and marked). Steps are the engine's own count.
    with _loaded_server(paced=True) as live:
        paced_base, _ = _steps_per_s(live.url, own=True)
    with _loaded_server(paced=True) as live:
        viewers = _viewers(live.ws_url, WINDOW_S + 2.0)
        time.sleep(1.0)
        paced_viewers, _ = _steps_per_s(live.url, own=True)
        dropped = httpx.get(live.url + "/api/engine", timeout=10).json()["dropped_frames"]
        viewers.communicate(timeout=60)

    print("live path: SimRunner at full speed in its engine process, 64 running decodes")
    print(f"  engine steps/s, 0 viewers          {base:9.1f}")
    print(
        f"  engine steps/s, {CLIENTS} viewers         {with_clients:9.1f}  "
        f"ratio {with_clients / base:5.2f}  (target >= 0.95)"
    )
    print(
        f"  engine steps/s, 1 stalled viewer   {stalled:9.1f}  "
        f"ratio {stalled / base:5.2f}  (target >= 0.95)"
    )
    print(
        f"  paced engine (never waits): steps/s 0 / {CLIENTS} viewers  {paced_base:7.1f} / "
        f"{paced_viewers:.1f}  ratio {paced_viewers / paced_base:5.2f}; frames dropped "
        f"(marked) with viewers {dropped}"
    )
    print(
        f"  engine process CPU per step        {base_cpu:.3f} / {clients_cpu:.3f} / "
        f"{stalled_cpu:.3f} ms (0 / {CLIENTS} / stalled viewers)"
    )
    print(f"  messages/s delivered per viewer    {seen['messages_per_s']:9.1f}")
    print(
        f"  delivery latency p50 / p99         {seen['latency_p50_ms']:7.1f} / "
        f"{seen['latency_p99_ms']:.1f} ms"
    )
    print(
        f"  GET /api/state p50 / p99, 0 viewers  {_pct(idle_state, 0.5):7.1f} / "
        f"{_pct(idle_state, 0.99):.1f} ms"
    )
    print(
        f"  GET /api/state p50 / p99, {CLIENTS} viewers {_pct(state, 0.5):7.1f} / "
        f"{_pct(state, 0.99):.1f} ms  (target p99 <= 50 ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
