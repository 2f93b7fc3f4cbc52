"""The vLLM adapter on a fleet bus (BATCHSCOPE_BUS): vLLM's real scheduler, observed by
batchscope_vllm in the vLLM venv, publishes to a nats-server the test starts; a `serve
--no-engine --bus` dashboard shows the node on /fleet from its summaries, every step of
them, and records the session in full where the node streams full detail (always).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from protocol.tasks import cancel_and_wait
from tests.app.bus import fleet_procs as fp
from tests.conftest import ROOT, TOKEN, free_port
from tests.vllm.venvs import require_vllm

AUTH = {"Authorization": f"Bearer {TOKEN}"}
SCENARIO = ROOT / "scenarios" / "kv_pressure.json"  # arrivals, preemptions


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(the bus URL, a dashboard consuming it)."""
    bus = fp.NatsServer(tmp_path / "js")
    port = free_port()
    dash = None
    try:
        db = f"sqlite:///{tmp_path}/dash.db"
        dash = fp.dashboard(port, db, bus.url, "vllm-fleet", tmp_path / "dash.log")
        yield bus.url, f"http://127.0.0.1:{port}"
    finally:
        if dash is not None:
            fp.stop(dash)
        bus.stop()


def _drive(python: str, bus: str, node: str, where: Path, detail: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("BATCHSCOPE_URL", "BATCHSCOPE_TOKEN")}
    env.update(
        PYTHONPATH=str(ROOT),  # nats-py: the vLLM venv's own (requirements/vllm-ref.txt)
        BATCHSCOPE_BUS=bus,
        BATCHSCOPE_BUS_DETAIL=detail,
        BATCHSCOPE_NODE=node,
        VLLM_LOGGING_LEVEL="ERROR",
    )
    out = where / node
    cmd = [python, str(ROOT / "tools" / "vllm_adapter_drive.py"), str(SCENARIO)]
    cmd += ["--out-dir", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result: dict[str, Any] = json.loads((out / f"{SCENARIO.stem}.json").read_text())
    return result


def _row(base: str, node: str) -> dict[str, Any] | None:
    page = httpx.get(f"{base}/api/fleet", timeout=10).json()
    return next((n for n in page["nodes"] if n["node"] == node), None)


def test_vllm_node_on_the_fleet_bus(fleet: tuple[str, str], tmp_path: Path) -> None:
    python = require_vllm("0.20")
    bus, base = fleet

    # On demand (the default): summaries only, every step of them.
    summary = _drive(python, bus, "vllm-sum", tmp_path, "on-demand")
    obs = summary["observer"]
    assert obs["delivered"] and obs["dropped"] == 0 and obs["observer_errors"] == 0
    fp.wait_for(lambda: (_row(base, "vllm-sum") or {}).get("session") == obs["session"], 60, "row")
    row = _row(base, "vllm-sum")
    assert row is not None and row["missed_steps"] == 0 and row["step"] > 10
    assert row["kv_total"] > 0 and row["preemptions"] > 0
    assert httpx.get(f"{base}/api/nodes", timeout=10).json() == []

    # Always: the same summaries, and the whole session recorded from the bus.
    full = _drive(python, bus, "vllm-full", tmp_path, "always")
    obs = full["observer"]
    assert obs["delivered"] and obs["dropped"] == 0
    port = int(base.rsplit(":", 1)[1])
    fp.wait_for(lambda: fp.recorded_through(port, obs["session"]) == obs["last_seq"], 60, "frames")
    seqs, gaps = fp.recorded(port, obs["session"])
    assert seqs == list(range(1, obs["last_seq"] + 1)) and gaps == []
    export = httpx.get(f"{base}/api/sessions/{obs['session']}/export?format=jsonl", timeout=60)
    frames = [json.loads(line) for line in export.text.splitlines()[1:]]
    assert frames[-1]["type"] == "session" and frames[-1]["data"]["reason"] == "shutdown"
    steps = [f["data"]["step"] for f in frames if f["type"] == "iteration"]
    fp.wait_for(lambda: (_row(base, "vllm-full") or {}).get("step") == steps[-1], 60, "summary")
    row_full = _row(base, "vllm-full")
    assert row_full is not None and row_full["missed_steps"] == 0
    # vLLM decides the same steps either way: both rows end at the same step.
    assert row_full["step"] == row["step"] and row_full["preemptions"] == row["preemptions"]


def test_vllm_sender_streams_detail_on_demand(fleet: tuple[str, str]) -> None:
    """The bus sender alone (no vLLM: its history is the session's opening frame): frames
    go out only once a dashboard asks; commands are refused; its end reaches who followed."""
    from batchscope_vllm.bus import BusSender

    bus, base = fleet
    announce = {"name": "on demand", "engine": "vllm", "model": "m"}
    sender = BusSender(bus, "vllm-od", announce, max_tokens=64, max_seqs=4, total_blocks=16)
    sender.start()
    try:
        fp.wait_for(lambda: sender.connects == 1, 60, "the sender on the bus")
        assert httpx.get(f"{base}/api/nodes", timeout=10).json() == []
        r = httpx.post(f"{base}/api/fleet/vllm-od/detail", headers=AUTH, timeout=30)
        assert r.status_code == 200 and r.json()["session"] == sender.session
        fp.wait_for(lambda: len(fp.nodes(int(base.rsplit(":", 1)[1]))) == 1, 60, "the node")
        r = httpx.post(f"{base}/api/pause", params={"session": sender.session}, headers=AUTH)
        assert r.status_code == 409 and "read-only" in r.text
        r = httpx.post(f"{base}/api/fleet/vllm-od/window", params={"seconds": 5}, headers=AUTH)
        assert r.status_code == 200 and r.json()["last_seq"] == 1
    finally:
        assert sender.close(10)
    port = int(base.rsplit(":", 1)[1])
    fp.wait_for(lambda: fp.recorded_through(port, sender.session) == sender.seq, 60, "the end")
    seqs, gaps = fp.recorded(port, sender.session)
    assert seqs == [1, 2] and gaps == []


def test_a_cancelled_connect_to_a_bus_that_is_away_ends() -> None:
    """The sender gives up a pending connect when it closes. nats-py retries a refused
    connect forever, and on Python 3.11 a cancel that meets the refusal inside
    `asyncio.wait_for` is lost (the loop goes on): one cancel left the sender's thread alive
    in a CI run. Cancelled at random points of nats-py's real connect loop, every try ends."""
    import asyncio
    import random

    import nats

    port = free_port()  # nothing listens there: every connect is refused

    async def quiet(exc: Exception) -> None:
        pass

    async def tries() -> int:
        ended = 0
        for _ in range(100):
            url = f"nats://127.0.0.1:{port}"
            connect = nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.0,
                                   connect_timeout=3, error_cb=quiet)  # fmt: skip
            task = asyncio.ensure_future(connect)
            await asyncio.sleep(random.random() * 0.01)
            await asyncio.wait_for(cancel_and_wait([task]), 30)
            ended += task.done()
        return ended

    assert asyncio.run(tries()) == 100


def test_vllm_sender_waits_for_a_bus_that_is_away(tmp_path: Path) -> None:
    """A bus away at the start holds nothing up: the sender keeps building (and closes at
    once if asked); once the bus is there, it connects and serves detail."""
    from batchscope_vllm.bus import BusSender

    bus = fp.NatsServer(tmp_path / "js")
    bus.stop()
    announce = {"name": "late bus", "engine": "vllm", "model": "m"}
    early = BusSender(bus.url, "vllm-early", announce, max_tokens=64, max_seqs=4, total_blocks=16)
    early.start()
    t0 = time.monotonic()
    assert not early.close(1.0)  # nothing could go out, and it did not wait for the bus
    assert time.monotonic() - t0 < 10  # close() returns within its timeout (+2 s join)
    # Its thread ends soon after (asyncio cancels the pending connect; slower on a busy box).
    early._thread.join(30)
    assert not early._thread.is_alive()

    late = BusSender(bus.url, "vllm-late", announce, max_tokens=64, max_seqs=4, total_blocks=16)
    late.start()
    try:
        time.sleep(2.0)
        assert late.connects == 0 and late._thread.is_alive()
        bus.start()
        fp.wait_for(lambda: late.connects == 1, 60, "the sender on the bus")
    finally:
        assert late.close(10)
        bus.stop()
