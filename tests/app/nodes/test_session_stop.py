"""Our engine's session stopped with requests in flight (a new session, `serve` ending, a
pushed engine stopped): the engine aborts what it still holds, as vLLM's engine core does
at a stop, so the recording shows every request finished, reason `abort`, at its last
step, with a finish time and E2E, instead of running or waiting forever."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.app.nodes.test_ingest import _producer, _serve, _stop, _wait
from tests.conftest import TOKEN, cli, free_port, start_server


def _state(url: str) -> dict[str, Any]:
    return dict(httpx.get(url + "/api/state", timeout=30).json())


def test_a_new_session_aborts_the_requests_in_flight_of_the_last() -> None:
    live, server, thread = start_server()
    try:
        with live.client() as c:
            _wait(lambda: _state(live.url).get("session"), 60)
            assert c.post("/api/pause", timeout=60).status_code == 200
            # 30 prompts of 200 tokens, more than a step's token budget: some run, the rest wait.
            r = c.post("/api/requests", json={"prompt_len": 200, "max_tokens": 100, "count": 30})
            assert r.status_code == 201, r.text
            assert c.post("/api/step", timeout=60).status_code == 200
            old = _state(live.url)["session"]
            _wait(lambda: _state(live.url)["step"] == 0, 60)  # (the step's frames are in)
            rows = _state(live.url)["requests"]
            assert {r["status"] for r in rows} == {"RUNNING", "WAITING"}, rows
            r = c.post("/api/engine/session", json={}, timeout=60)
            assert r.status_code == 200, r.text
            assert r.json()["session"] != old

            def ended() -> dict[str, Any] | None:
                s = httpx.get(f"{live.url}/api/sessions/{old}", timeout=30).json()
                return s if s.get("ended_at") else None

            def recorded() -> list[dict[str, Any]] | None:
                state = httpx.get(f"{live.url}/api/sessions/{old}/state", timeout=30).json()
                rows: list[dict[str, Any]] = state["requests"]
                done = len(rows) == 30 and all(r["status"] == "FINISHED" for r in rows)
                return rows if done and ended() else None

            rows = _wait(recorded, 60)
            for row in rows:
                assert (row["status"], row["finish_reason"]) == ("FINISHED", "abort"), row
                assert row["finish_step"] == 0 and row["finish_t"] >= row["arrived_t"], row
            table = httpx.get(
                f"{live.url}/api/sessions/{old}/requests", params={"limit": 100}, timeout=30
            ).json()
            assert len(table) == 30
            assert all(r["finish_reason"] == "abort" and r["e2e"] is not None for r in table)
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_pushed_engine_stopped_ends_its_session_with_the_requests_aborted(
    tmp_path: Path,
) -> None:
    """`batchscope engine --push` stopped (SIGTERM) with requests in flight: it ends its
    session (reason `shutdown`) after recording them aborted."""
    db_url = f"sqlite:///{tmp_path / 'dash.db'}"
    cli("db", "upgrade", "--database-url", db_url, check=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    dash = _serve(port, db_url)
    prod = _producer(port, "--workload", "none")
    try:
        node = _wait(
            lambda: next(n for n in httpx.get(base + "/api/nodes").json() if n["state"] == "live"),
            60,
        )
        session = node["session"]
        assert httpx.post(base + "/api/pause", headers=auth, timeout=60).status_code == 200
        r = httpx.post(
            base + "/api/requests",
            headers=auth,
            json={"prompt_len": 200, "max_tokens": 100, "count": 30},
            timeout=60,
        )
        assert r.status_code == 201, r.text
        assert httpx.post(base + "/api/step", headers=auth, timeout=60).status_code == 200
        _wait(lambda: httpx.get(f"{base}/api/sessions/{session}").json()["steps"] == 1, 60)
        prod.terminate()
        assert prod.wait(30) == 0
        ended = _wait(
            lambda: next(n for n in httpx.get(base + "/api/nodes").json() if n["state"] == "ended"),
            60,
        )
        assert (ended["session"], ended["end_reason"]) == (session, "shutdown"), ended

        def recorded() -> list[dict[str, Any]] | None:
            # The recorder writes behind the node's state: wait until the closing frames
            # are in (every row finished), then check how they ended.
            rows: list[dict[str, Any]] = httpx.get(
                f"{base}/api/sessions/{session}/requests", params={"limit": 100}, timeout=30
            ).json()
            done = len(rows) == 30 and all(r["status"] == "FINISHED" for r in rows)
            return rows if done else None

        table = _wait(recorded, 60)
        for row in table:
            assert (row["status"], row["finish_reason"]) == ("FINISHED", "abort"), row
            assert row["finish_step"] == 0 and row["e2e"] is not None, row
    finally:
        _stop(prod)
        _stop(dash)
