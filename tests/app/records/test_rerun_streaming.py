"""Re-running a long recording streams off the event loop: the server keeps answering
throughout (no stall near the seconds a starved loop shows), and the re-run is recorded
whole."""

from __future__ import annotations

import threading
import time

import httpx

from app.db.migrate import upgrade
from tests.conftest import server_process


def test_a_long_rerun_never_freezes_the_server(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/rerun.db"
    upgrade(url)
    with server_process(url, realtime="false") as server, server.client(token=True) as c:
        c.post("/api/requests", json={"prompt_len": 40, "max_tokens": 1000, "count": 256})
        # Setup, not a speed test: a loaded 2-core box folds ~150-300 steps/s flat out.
        deadline = time.monotonic() + 300
        while httpx.get(server.url + "/api/state").json()["step"] < 15_000:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        original = httpx.get(server.url + "/api/state").json()["session"]
        c.post("/api/pause")
        latencies: list[float] = []
        done = threading.Event()

        def poll() -> None:
            while not done.is_set():
                t0 = time.monotonic()
                httpx.get(server.url + "/healthz", timeout=30)
                latencies.append(time.monotonic() - t0)
                time.sleep(0.02)

        poller = threading.Thread(target=poll)
        poller.start()
        started = time.monotonic()
        try:
            r = c.post(f"/api/sessions/{original}/rerun", json={}, timeout=300)
        finally:
            took = time.monotonic() - started
            done.set()
            poller.join()
        assert r.status_code == 200, r.text
        rerun = r.json()
        assert rerun["steps"] > 10_000
        row = c.get(f"/api/sessions/{rerun['session']}").json()
        assert row["steps"] == rerun["steps"] and row["ended_at"] is not None
    # A loop the re-run starves stalls for seconds (it used to: 6-13 s). On a loaded 2-core
    # box a healthy one still misses a beat now and then (1.04 s was seen at load 12).
    assert len(latencies) > 20
    assert max(latencies) < 3.0, (
        f"the loop stalled {max(latencies):.2f}s during the {took:.1f}s re-run"
    )
