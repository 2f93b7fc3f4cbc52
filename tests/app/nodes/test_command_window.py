"""Commands are not starved by a flat-out engine: the link carries at most a window of
unacknowledged frames (app.nodes.engine_host), so a pause's reply is never queued behind
the rest of the run. Before the window, the dashboard buffered every frame the engine
could make and a pause answered only after the engine had finished everything."""

from __future__ import annotations

import time

import httpx

from tests.conftest import server_process

MAX_TOKENS = 6000
TOTAL_OUTPUT = 256 * MAX_TOKENS
ENGINE = {
    "realtime": "false",
    # Room for all 256 to run at once, each step decoding all of them as under a full
    # batch: the run (~6,000 steps) is far from done after the pauses below. (With the
    # default pool most of them waited, a step decoded ~8 and the engine made 2,500-5,000
    # steps a second.)
    "max_num_seqs": 256,
    "max_num_batched_tokens": 8192,
    "max_model_len": 8192,
    "num_gpu_blocks": 100_000,
}


def test_pause_stops_a_flat_out_engine_where_it_is() -> None:
    with server_process("sqlite://", **ENGINE) as server, server.client() as c:
        c.post("/api/requests", json={"prompt_len": 40, "max_tokens": MAX_TOKENS, "count": 256})
        deadline = time.monotonic() + 60
        while httpx.get(server.url + "/api/state").json()["step"] < 500:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        for _ in range(3):
            t0 = time.monotonic()
            r = c.post("/api/pause", timeout=60)
            assert r.status_code == 200, r.text
            # Generous (the target is 0.1 s): a reply queued behind the run took 6-13 s.
            assert time.monotonic() - t0 < 5.0, "the pause waited behind the engine's frames"
            paused = httpx.get(server.url + "/api/state").json()
            # The reply came after the pause's own state mark, with the run far from done,
            # and the view stays where it is (below): what the dashboard shows is where
            # the engine stopped. (No bound on the steps made while the pause crossed the
            # dashboard's loop: that is the machine's pace, 50-1,300 steps here.)
            assert paused["paused"] is True
            assert paused["totals"]["output_tokens"] < TOTAL_OUTPUT
            time.sleep(1.0)
            later = httpx.get(server.url + "/api/state").json()
            assert later["step"] == paused["step"], "the engine ran on after its pause's reply"
            assert c.post("/api/resume", timeout=60).status_code == 200
            time.sleep(0.3)
        assert httpx.get(server.url + "/api/state").json()["step"] > paused["step"]
