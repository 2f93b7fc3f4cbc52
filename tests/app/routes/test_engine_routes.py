"""/api/engine: the local engine process's status, a restart, and a new session under
other knobs (the engine loop's included), over a real server and engine process."""

from __future__ import annotations

import time

import httpx
from bs4 import BeautifulSoup

from tests.conftest import LiveServer, start_server


def _state(c: httpx.Client) -> dict:
    body: dict = c.get("/api/state").json()
    return body


def test_status_names_the_running_process_and_its_session(live_server: LiveServer) -> None:
    with live_server.client() as c:
        status = c.get("/api/engine").json()
        assert status["state"] == "running" and status["pid"] > 0
        assert status["session"] == _state(c)["session"]
        assert status["last_exit"] is None and status["restarts"] == 0
        assert c.get("/healthz").json()["checks"]["engine"]["ok"] is True


def test_new_session_with_async_scheduling(live_server: LiveServer) -> None:
    with live_server.client() as c:
        before = _state(c)["session"]
        r = c.post(
            "/api/engine/session",
            json={"async_scheduling": True, "max_num_seqs": 4, "vllm_version": "0.20"},
        )
        assert r.status_code == 200, r.text
        session = r.json()["session"]
        assert session != before
        state = _state(c)
        assert state["session"] == session and state["meta"]["source"] == "local"
        assert state["config"]["async_scheduling"] is True
        assert state["config"]["max_num_seqs"] == 4
        assert state["config"]["vllm_version"] == "0.20"
        # The engine runs it: requests finish under the batch queue.
        r = c.post("/api/requests", json={"prompt_len": 20, "max_tokens": 4, "count": 3})
        assert r.status_code == 201, r.text
        deadline = time.monotonic() + 20
        while sum(q["status"] == "FINISHED" for q in _state(c)["requests"]) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # The previous session ended (listed as not live, once the recorder wrote it).
        while True:
            rows = {s["id"]: s for s in c.get("/api/sessions").json()}
            if before in rows:
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert rows[before]["live"] is False


def test_new_session_refusals_are_clear(live_server: LiveServer) -> None:
    with live_server.client() as c:
        before = _state(c)["session"]
        r = c.post(
            "/api/engine/session", json={"async_scheduling": True, "num_speculative_tokens": 2}
        )
        assert r.status_code == 422 and "speculative" in r.json()["detail"]
        r = c.post("/api/engine/session", json={"batching": "bogus"})
        assert r.status_code == 422
        r = c.post("/api/engine/session", json={"vllm_version": "0.19"})
        assert r.status_code == 422 and "vllm_version" in r.text
        assert c.post(
            "/api/engine/session", json={}, headers={"Authorization": ""}
        ).status_code in (
            401,
            403,
        )
        assert _state(c)["session"] == before  # nothing started


def test_restart_replaces_the_process(live_server: LiveServer) -> None:
    with live_server.client() as c:
        first = c.get("/api/engine").json()
        r = c.post("/api/engine/restart")
        assert r.status_code == 200, r.text
        now = c.get("/api/engine").json()
        assert now["pid"] != first["pid"] and now["session"] == r.json()["session"]
        assert now["last_exit"]["code"] == 0  # stopped in order
        assert _state(c)["session"] == now["session"]


def test_a_requested_restart_is_shown_as_a_restart_not_a_crash(live_server: LiveServer) -> None:
    """A restart the user asked for is no crash: the exit says it was requested, and once
    the fresh engine runs the panel shows it running, with no exit warning (red) left."""
    with live_server.client() as c:
        assert c.post("/api/engine/restart").status_code == 200
        now = c.get("/api/engine").json()
        assert now["state"] == "running" and now["restarts"] == 0
        assert now["last_exit"]["requested"] is True
        assert now["last_exit_text"].startswith("stopped on request")
        panel = BeautifulSoup(c.get("/panels/controls").text, "html.parser")
        assert panel.select_one("#engine-exit") is None and not panel.select(".warn")
        box, badge = panel.select_one("#engine-panel"), panel.select_one("#engine-state")
        assert box is not None and badge is not None
        assert box.get("open") is None and badge.get_text() == "running"
        assert f"Process {now['pid']}" in box.get_text()
        assert c.get("/healthz").json()["checks"]["engine"]["ok"] is True


def test_without_a_local_engine_it_says_so() -> None:
    live, server, thread = start_server(engine=False)
    try:
        with live.client() as c:
            r = c.get("/api/engine")
            assert r.status_code == 409 and "--no-engine" in r.json()["detail"]
    finally:
        server.should_exit = True
        thread.join(10)
