"""Shared by the browser tests and tools/ui_bench.py: the server launcher, the console
collector and a synthetic n-request snapshot for the timeline's scale benchmark.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.lifeline import die_with_us

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
ROOT = Path(__file__).resolve().parents[2]
TOKEN = "browser-test-token"
# The article's step table for the seed scenario (scenarios/seed.json).
SEED_PLANS = ["{A:4, B:2}", "{A:1, B:4, C:1}", "{B:2, C:2}", "{B:1, C:1}", "{B:1}"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    token: str
    log: Path
    proc: subprocess.Popen[bytes]

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.request(method, self.url + path, headers=headers, timeout=10, **kwargs)


def migrate(db_file: Path) -> None:
    """`batchscope db upgrade`: migrations run as their own command before serve (R9)."""
    subprocess.run(
        [sys.executable, "-m", "app.cli", "db", "upgrade", "--database-url",
         f"sqlite:///{db_file}"],
        cwd=ROOT, check=True, capture_output=True, timeout=120,
    )  # fmt: skip


def start_server(
    tmp: Path, workload: str = "none", migrated: Path | None = None, engine: bool = True
) -> Server:
    """Serve from a fresh database in `tmp` (a copy of `migrated` when given); with
    `engine=False`, `serve --no-engine` (a pure observer of pushed nodes)."""
    port = free_port()
    log = tmp / "server.log"
    db_file = tmp / "db.sqlite"
    if migrated is not None:
        shutil.copyfile(migrated, db_file)
    else:
        migrate(db_file)
    db_url = f"sqlite:///{db_file}"
    cmd = [
        sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--runner", "sim",
        "--workload", workload, "--database-url", db_url, "--token", TOKEN,
    ]  # fmt: skip
    if not engine:
        cmd.append("--no-engine")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_us()
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early:\n{log.read_text()}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return Server(url, TOKEN, log, proc)
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.terminate()
    raise RuntimeError(f"server did not start:\n{log.read_text()}")


def load_seed_recording(srv: Server, timeout: float = 30.0) -> str:
    """Load the seed scenario on `srv` and wait until its 5 steps are finished and
    recorded; its session id."""
    resp = srv.api("POST", "/api/scenarios/seed/load")
    assert resp.status_code == 200, resp.text
    sid: str = resp.json()["session"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = srv.api("GET", f"/api/sessions/{sid}/state")
        if state.status_code == 200:
            reqs = state.json()["requests"]
            if len(reqs) == 3 and all(r["status"] == "FINISHED" for r in reqs):
                return sid
        time.sleep(0.2)
    raise AssertionError(f"the seed session was not recorded: {srv.log.read_text()}")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@dataclass
class Console:
    errors: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    """Requests to anything but our own server (the page must work offline)."""

    def watch(self, page: Any, server_url: str) -> Any:
        """Collect the page's console errors, uncaught exceptions and foreign requests."""
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on(
            "request",
            lambda r: (
                None if r.url.startswith((server_url, "data:")) else self.foreign.append(r.url)
            ),
        )
        return page


def synthetic_snapshot(n: int) -> dict[str, Any]:
    """n finished requests with waiting, chunked prefill, decode and some preemptions."""
    requests = []
    last = 0
    for i in range(n):
        a = (i * 3) // 2
        segs: list[list[Any]] = [
            ["waiting", a, a + 3, 0],
            ["prefill", a + 4, a + 4, 256],
            ["prefill", a + 5, a + 5, 100],
        ]
        if i % 7 == 0:
            segs += [
                ["decode", a + 6, a + 20, 15],
                ["preempted", a + 21, a + 30, 120],
                ["prefill", a + 31, a + 31, 120],
                ["decode", a + 32, a + 60, 29],
            ]
        else:
            segs.append(["decode", a + 6, a + 40, 35])
        last = max(last, segs[-1][2])
        requests.append(
            {
                "req": f"req-{i}",
                "status": "FINISHED",
                "num_prompt_tokens": 356,
                "num_tokens": 400,
                "num_computed_tokens": 399,
                "max_tokens": 44,
                "priority": 0,
                "num_preemptions": int(i % 7 == 0),
                "prefix_hit": 64 if i % 5 == 0 else 0,
                "arrived_step": a,
                "arrived_t": a * 0.01,
                "first_scheduled_step": a + 4,
                "first_token_t": a * 0.01 + 0.05,
                "finish_step": segs[-1][2],
                "finish_reason": "length",
                "waiting_reason": None,
                "segments": segs,
            }
        )
    history = [
        {
            "step": s,
            "t": s * 0.01,
            "prefill": 100,
            "decode": 20,
            "max_tokens": 256,
            "seqs": 20,
            "max_seqs": 32,
            "running": 20,
            "waiting": 5,
            "kv_used": 100,
            "kv_cached": 20,
            "kv_total": 256,
            "plan": {},
            "finished": [],
            "preempted_ids": [],
        }
        for s in range(max(0, last - 1999), last + 1)
    ]
    return {
        "v": 1,
        "type": "snapshot",
        "session": "scale",
        "seq": 1,
        "data": {
            "session": "scale",
            "meta": {},
            "step": last,
            "t": last * 0.01,
            "config": {"max_num_batched_tokens": 256},
            "config_version": 1,
            "config_marks": [
                {"step": 100, "changes": {"max_num_batched_tokens": 32}, "version": 1}
            ],
            "paused": False,
            "simulated": True,
            "requests": requests,
            "blocks": [[b, "used", "req-1", 1] for b in range(1, 257)],
            "history": history,
            "totals": {},
        },
    }
