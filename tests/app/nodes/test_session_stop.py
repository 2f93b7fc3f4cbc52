"""Our engine's session stopped with requests in flight (a new session here; `serve`
ending likewise): the engine aborts what it still holds, as vLLM's engine core does at a
stop, so the recording shows every request finished, reason `abort`, at its last step,
with a finish time and E2E, instead of running or waiting forever."""

from __future__ import annotations

from typing import Any

import httpx

from tests.app.nodes.test_ingest import _wait
from tests.conftest import start_server


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
