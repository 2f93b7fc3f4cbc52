"""Remote producers: `batchscope engine --push` into `serve --no-engine`, malformed frames,
control over the ingest socket, and resuming after the dashboard restarts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from tests.conftest import ROOT, TOKEN, cli, free_port
from tests.lifeline import die_with_us


def _serve(port: int, db: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-m",
        "app.cli",
        "serve",
        "--no-engine",
        "--port",
        str(port),
        "--token",
        TOKEN,
        "--database-url",
        db,
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
        preexec_fn=die_with_us(),
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("dashboard did not start")


def _producer(port: int, *extra: str) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-m",
        "app.cli",
        "engine",
        "--push",
        f"ws://127.0.0.1:{port}/ws/ingest",
        "--token",
        TOKEN,
        "--runner",
        "sim",
        "--node",
        "n1",
        *extra,
    ]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=die_with_us(),
    )


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _wait(fn: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, KeyError, IndexError, StopIteration):
            value = fn()
            if value:
                return value
        time.sleep(0.1)
    raise AssertionError("condition not reached")


@pytest.fixture
def db_url(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'dash.db'}"
    cli("db", "upgrade", "--database-url", url, check=True)
    yield url


def test_a_pushed_engine_is_live_controllable_and_resumes_after_a_restart(db_url: str) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    dash = _serve(port, db_url)
    prod = _producer(port, "--workload", "poisson", "--buffer", "100000")
    try:
        node = _wait(
            lambda: next(
                n
                for n in httpx.get(base + "/api/nodes").json()
                if n["state"] == "live" and n["frames"] > 20
            )
        )
        session = node["session"]
        state = httpx.get(base + "/api/state").json()  # the follower view: the node's session
        assert state["session"] == session and state["meta"]["source"] == "node:n1"

        r = httpx.post(
            base + "/api/requests", headers=auth, json={"prompt_len": 33, "max_tokens": 3}
        )
        assert r.status_code == 201 and r.json()["req_ids"] == ["n1-1"]
        _wait(
            lambda: (
                next(x for x in httpx.get(base + "/api/requests").json() if x["req"] == "n1-1")[
                    "status"
                ]
                == "FINISHED"
            )
        )
        bad = httpx.post(base + "/api/config", headers=auth, json={"max_num_seqs": 10**6})
        assert bad.status_code == 422 and bad.json()["detail"].startswith("max_num_batched_tokens")

        # The dashboard goes away; the engine keeps running and buffering.
        _stop(dash)
        time.sleep(2.0)
        dash = _serve(port, db_url)
        node2 = _wait(
            lambda: next(n for n in httpx.get(base + "/api/nodes").json() if n["state"] == "live")
        )
        assert node2["session"] == session  # the same session continues
        _wait(lambda: httpx.get(base + "/api/state").json()["step"] > state["step"] + 50)
        assert node2["gaps"] == 0
    finally:
        _stop(prod)
        _stop(dash)
    listing = cli("sessions", "--json", "--database-url", db_url, check=True)
    rows = json.loads(listing.stdout)
    assert [r["id"] for r in rows] == [session] and rows[0]["source"] == "node:n1"


async def _ingest(port: int, token: str | None = TOKEN) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return await websockets.connect(f"ws://127.0.0.1:{port}/ws/ingest", additional_headers=headers)


def test_malformed_frames_get_clear_errors_and_gaps_are_visible(db_url: str) -> None:
    port = free_port()
    dash = _serve(port, db_url)

    async def scenario() -> None:
        with pytest.raises(websockets.InvalidStatus) as info:
            await _ingest(port, token=None)
        assert info.value.response.status_code == 403
        ws = await _ingest(port)
        await ws.send(json.dumps({"type": "announce", "node": "raw", "session": "s-raw"}))
        welcome = json.loads(await ws.recv())
        assert welcome.pop("resume_key")  # issued to the session's creator
        assert welcome == {"type": "welcome", "session": "s-raw", "last_seq": 0}
        opened = {
            "v": 1,
            "type": "session",
            "session": "s-raw",
            "seq": 1,
            "data": {"event": "opened", "name": "raw", "source": "node:raw"},
        }
        await ws.send(json.dumps(opened))
        await ws.send("{not json")
        assert json.loads(await ws.recv())["detail"].startswith("not valid JSON")
        bad = {"v": 1, "type": "iteration", "session": "s-raw", "seq": 2, "data": {"step": 0}}
        await ws.send(json.dumps(bad))
        err = json.loads(await ws.recv())
        assert err["seq"] == 2 and err["detail"].startswith("iteration frame: ")
        req = {
            "v": 1,
            "type": "request",
            "session": "s-raw",
            "seq": 5,
            "data": {
                "req": "x",
                "kind": "arrived",
                "step": 0,
                "t": 0.1,
                "detail": {"num_prompt_tokens": 3, "max_tokens": 2},
            },
        }
        await ws.send(json.dumps(req))
        await asyncio.sleep(0.5)
        await ws.close()

    try:
        asyncio.run(scenario())
        health = f"http://127.0.0.1:{port}/healthz"
        _wait(
            lambda: (
                (r := httpx.get(health).json()["checks"]["recorder"]["info"])
                and r["written"] >= 3
                and r["lag"] == 0
            )
        )
        nodes = httpx.get(f"http://127.0.0.1:{port}/api/nodes").json()
        raw = next(n for n in nodes if n["node"] == "raw")
        assert raw["invalid"] == 2 and raw["gaps"] == 1 and raw["missing"] == 3
        assert raw["state"] == "disconnected"
        with websockets_sync_connect(port) as frames:
            types = [(f["seq"], f["type"], f["data"].get("event")) for f in frames]
        assert (2, "session", "gap") in types and (5, "request", None) in types
    finally:
        _stop(dash)


@contextlib.contextmanager
def websockets_sync_connect(port: int) -> Iterator[list[dict[str, Any]]]:
    """Replay the raw session and return its frames (seq order)."""
    from websockets.sync.client import connect

    with connect(f"ws://127.0.0.1:{port}/ws/live") as ws:
        ws.send(json.dumps({"type": "hello", "session": "s-raw", "mode": "replay"}))
        json.loads(ws.recv())
        ws.send(json.dumps({"type": "seek", "step": -1}))
        json.loads(ws.recv())
        ws.send(json.dumps({"type": "play", "speed": 1000}))
        frames: list[dict[str, Any]] = []
        while not frames or frames[-1]["seq"] < 5:
            msg = json.loads(ws.recv(timeout=10))
            frames.extend(msg if isinstance(msg, list) else [msg])
        yield frames
