"""What reads a live session's recording (the export, the state at its last step, a re-run
of its arrivals) sees every frame the live view has shown, even those the recorder has not
written yet: it writes them first."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.records.recorder import Recorder
from protocol.codes import FrameType, RequestMark
from tests.conftest import start_server

COUNT = 3
Shown = tuple[httpx.Client, dict[str, Any]]


@pytest.fixture
def shown() -> Iterator[Shown]:
    """A live session whose requests all finished, with their frames held in the
    recorder's batch (its periodic flush held back): (client, its /api/state)."""
    live, server, thread = start_server(max_num_seqs=4)
    try:
        recorder: Recorder = live.app.state.recorder
        recorder.flush_interval = 3600.0  # frames now wait in the recorder's batch ...
        time.sleep(1.0)  # ... once its current wait (0.25 s) is over
        with live.client() as c:
            c.post("/api/requests", json={"prompt_len": 16, "max_tokens": 8, "count": COUNT})
            deadline = time.monotonic() + 60
            while True:
                state = c.get("/api/state").json()
                if sum(r["status"] == "FINISHED" for r in state["requests"]) == COUNT:
                    break
                assert time.monotonic() < deadline, state["requests"]
                time.sleep(0.1)
            assert recorder.pending  # the recording trails what the live view shows
            yield c, state
    finally:
        server.should_exit = True
        thread.join(10)


def test_an_export_right_after_the_requests_finish_holds_them_all(shown: Shown) -> None:
    c, state = shown
    got = c.get(f"/api/sessions/{state['session']}/export?format=jsonl")
    assert got.status_code == 200, got.text
    frames = [json.loads(line) for line in got.text.splitlines()[1:]]  # after the header
    assert max(f["seq"] for f in frames) >= state["seq"]
    finished = {
        f["data"]["req"]
        for f in frames
        if f["type"] == FrameType.REQUEST and f["data"]["kind"] == RequestMark.FINISHED
    }
    assert finished == {r["req"] for r in state["requests"]}


def test_the_state_at_the_last_step_is_the_one_shown(shown: Shown) -> None:
    c, state = shown
    got = c.get(f"/api/sessions/{state['session']}/state")
    assert got.status_code == 200, got.text
    assert {r["req"]: r["status"] for r in got.json()["requests"]} == {
        r["req"]: r["status"] for r in state["requests"]
    }


def test_a_rerun_takes_every_arrival_shown(shown: Shown) -> None:
    c, state = shown
    got = c.post(f"/api/sessions/{state['session']}/rerun", json={}, timeout=120)
    assert got.status_code == 200, got.text
    rerun = c.get(f"/api/sessions/{got.json()['session']}").json()
    assert rerun["requests"] == COUNT
