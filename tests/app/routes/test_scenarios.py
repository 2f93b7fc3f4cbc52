"""Scenario files: listed, and loaded into a new live session that runs them exactly."""

from __future__ import annotations

import time

from tests.conftest import LiveServer


def test_scenario_load_runs_the_seed_table(live_server: LiveServer) -> None:
    with live_server.client() as c:
        names = [s["name"] for s in c.get("/api/scenarios").json()]
        assert {
            "seed",
            "kv_pressure",
            "shared_prefixes",
            "priority",
            "long_prompt_vs_decodes",
        } <= set(names)
        assert c.post("/api/scenarios/nope/load").status_code == 404
        assert c.post("/api/scenarios/seed/load").status_code == 200
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            state = c.get("/api/state").json()
            if sum(1 for r in state["requests"] if r["status"] == "FINISHED") == 3:
                break
            time.sleep(0.05)
        plans = [h["plan"] for h in state["history"]]
        assert plans == [
            {"A": 4, "B": 2},
            {"A": 1, "B": 4, "C": 1},
            {"B": 2, "C": 2},
            {"B": 1, "C": 1},
            {"B": 1},
        ]
