"""Controls follow the session (issue 31): `?session=ID` drives that session's producer (a
pushed node's engine, never the local one), GET /api/config and /api/state show that
session's own knobs and state, inject is validated against its engine's knobs, and a
producer that cannot obey (an observed vLLM node, an ended session, a recording) gets a
409 with the reason while no command reaches any engine."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from tests.conftest import ROOT, TOKEN, LiveServer, start_server
from tests.lifeline import die_with_us

CONTROLS = ("/api/pause", "/api/resume", "/api/step", "/api/config", "/api/requests")


def _wait(fn: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, KeyError, StopIteration):
            value = fn()
            if value:
                return value
        time.sleep(0.1)
    raise AssertionError("condition not reached")


@pytest.fixture
def dashboard() -> Iterator[LiveServer]:
    """A dashboard whose local engine keeps stepping (a brisk Poisson workload)."""
    live, server, thread = start_server(workload="poisson", workload_rate=20.0)
    yield live
    server.should_exit = True
    thread.join(10)


@pytest.fixture
def pushed(dashboard: LiveServer) -> Iterator[subprocess.Popen[bytes]]:
    """`batchscope engine --push` as node n1, its knobs unlike the local engine's."""
    cmd = [
        sys.executable, "-m", "app.cli", "engine", "--push", dashboard.ws_url + "/ws/ingest",
        "--token", TOKEN, "--runner", "sim", "--node", "n1", "--workload", "poisson",
    ]  # fmt: skip
    env = {
        **os.environ,
        "BATCHSCOPE_MAX_MODEL_LEN": "2048",
        "BATCHSCOPE_MAX_NUM_SEQS": "7",
        "BATCHSCOPE_WORKLOAD_RATE": "20",
    }
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=die_with_us(),
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _node_session(c: httpx.Client, node: str) -> str:
    views = c.get("/api/nodes").json()
    return str(next(v["session"] for v in views if v["node"] == node and v["frames"] > 5))


def _step(c: httpx.Client, session: str | None = None) -> int:
    query = {"session": session} if session else {}
    return int(c.get("/api/state", params=query).json()["step"])


def test_controls_reach_the_pushed_node_and_not_the_local_engine(
    dashboard: LiveServer, pushed: subprocess.Popen[bytes]
) -> None:
    with dashboard.client() as c:
        remote = _wait(lambda: _node_session(c, "n1"))
        local = c.get("/api/state").json()["session"]
        assert remote != local

        # Its own knobs and state, not the local engine's; no local workload on it.
        cfg = c.get("/api/config", params={"session": remote}).json()
        assert cfg["config"]["max_num_seqs"] == 7 and cfg["config"]["max_model_len"] == 2048
        assert cfg["workload"] is None
        assert c.get("/api/config").json()["config"]["max_num_seqs"] == 16
        assert c.get("/api/state", params={"session": remote}).json()["session"] == remote
        assert c.get("/api/state", params={"session": "nope"}).status_code == 404

        # Knobs: applied to the node only.
        r = c.post("/api/config", params={"session": remote}, json={"max_num_seqs": 5})
        assert r.status_code == 200, r.text
        _wait(
            lambda: (
                c.get("/api/config", params={"session": remote}).json()["config"]["max_num_seqs"]
                == 5
            )
        )
        assert c.get("/api/config").json()["config"]["max_num_seqs"] == 16

        # Inject: validated against the node's max_model_len (2048), not the local 1024.
        r = c.post(
            "/api/requests",
            params={"session": remote},
            json={"prompt_len": 1500, "max_tokens": 400},
        )
        assert r.status_code == 201, r.text
        (req,) = r.json()["req_ids"]
        assert req.startswith("n1-")
        too_long = c.post("/api/requests", json={"prompt_len": 1500, "max_tokens": 4})
        assert too_long.status_code == 422  # the local engine's limit is its own
        busy = c.post("/api/requests", json={"prompt_len": 500, "max_tokens": 500})
        assert busy.status_code == 201  # the local engine has work throughout

        # Pause reaches the node: it stops where it is; the local engine keeps stepping.
        r = c.post("/api/pause", params={"session": remote})
        assert r.status_code == 200, r.text
        _wait(lambda: c.get("/api/state", params={"session": remote}).json()["paused"])
        frozen, local_before = _step(c, remote), _step(c)
        time.sleep(1.0)
        assert _step(c, remote) == frozen
        assert _step(c) > local_before
        assert c.get("/api/state").json()["paused"] is False

        # Step: exactly one more step there (the injected request is still running).
        assert c.post("/api/step", params={"session": remote}).status_code == 200
        _wait(lambda: _step(c, remote) != frozen)
        time.sleep(0.5)
        assert _step(c, remote) == frozen + 1

        r = c.post(f"/api/requests/{req}/abort", params={"session": remote})
        assert r.status_code == 200 and r.json()["aborted"] == [req]

        # The local engine's workload is not the node's to set.
        r = c.post("/api/workload", params={"session": remote}, json={"rate": 1})
        assert r.status_code == 409 and "local" in r.json()["detail"]

        assert c.post("/api/resume", params={"session": remote}).status_code == 200
        _wait(lambda: _step(c, remote) > frozen + 3)

        # An ended session: its producer is gone; nothing goes to the local engine.
        pushed.terminate()
        pushed.wait(10)
        _wait(lambda: any(v["state"] == "ended" for v in c.get("/api/nodes").json()))
        local_paused = c.get("/api/state").json()["paused"]
        for path in CONTROLS:
            r = c.post(path, params={"session": remote}, json={"max_num_seqs": 4})
            assert r.status_code == 409 and "ended" in r.json()["detail"], (path, r.text)
        assert c.get("/api/state").json()["paused"] == local_paused


@contextlib.contextmanager
def _vllm_node(url: str) -> Iterator[ClientConnection]:
    """An observed vLLM node, as its adapter announces itself."""
    with connect(url + "/ws/ingest", additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
        yield _announce_vllm(ws)


def _announce_vllm(ws: ClientConnection) -> ClientConnection:
    announce = {
        "type": "announce", "node": "gpu-7", "session": "s-vllm", "engine": "vllm",
        "model": "m", "config": {"max_num_seqs": 3, "max_model_len": 4096},
    }  # fmt: skip
    ws.send(json.dumps(announce))
    assert json.loads(ws.recv(timeout=10))["type"] == "welcome"
    opened = {"event": "opened", "name": "gpu-7", "source": "node:gpu-7"}
    ws.send(json.dumps({"v": 1, "type": "session", "session": "s-vllm", "seq": 1, "data": opened}))
    return ws


def test_a_read_only_node_or_a_recording_answers_409_and_no_engine_is_driven(
    dashboard: LiveServer,
) -> None:
    with dashboard.client() as c:
        _wait(lambda: _step(c) >= 0)
        with _vllm_node(dashboard.ws_url) as ws:
            _wait(lambda: c.get("/api/state", params={"session": "s-vllm"}).status_code == 200)
            for path in (*CONTROLS, "/api/requests/r1/abort"):
                r = c.post(path, params={"session": "s-vllm"}, json={"max_num_seqs": 4})
                assert r.status_code == 409, (path, r.text)
                assert "read-only" in r.json()["detail"] and "gpu-7" in r.json()["detail"]
            with pytest.raises(TimeoutError):
                ws.recv(timeout=0.5)  # no command was sent to the node
            cfg = c.get("/api/config", params={"session": "s-vllm"}).json()
            assert cfg["config"]["max_num_seqs"] == 3
        assert c.get("/api/state").json()["paused"] is False  # nor to the local engine

        r = c.post("/api/pause", params={"session": "no-such-session"})
        assert r.status_code == 409 and "no producer" in r.json()["detail"]
