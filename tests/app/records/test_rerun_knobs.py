"""A re-run replays the recording's knob changes at their recorded times, as it replays
its arrivals, on SQLite and PostgreSQL through the real route (POST
/api/sessions/ID/rerun, the re-run in its own engine process): under the recorded knobs
the re-run decides exactly what the recording decided, the budget changing at the same
step; a knob given to the re-run holds throughout, the other recorded changes still
happen. (Seq slots are raised, not cut: our engine, like vLLM, asserts that no more run
than `max_num_seqs`, and a cut below the running count trips it.)"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.db.queries import iter_frames
from app.live.hub import EventHub
from app.records.recorder import Recorder
from app.records.rerun import load_knob_changes
from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.engine import Engine
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from engine.virtual_clock import VirtualClock
from tests.app.records.conftest import NewUrl, open_sessions
from tests.app.records.helpers import HubPublisher, open_sim_session
from tests.conftest import TOKEN, start_server

CHANGE_STEP = 40
CHANGES = {"max_num_batched_tokens": 48, "max_num_seqs": 8}
SID = "s-knobs-1"


def _config() -> EngineConfig:
    return EngineConfig(
        SchedulerConfig(max_num_batched_tokens=128, max_num_seqs=4, max_model_len=512),
        CacheConfig(block_size=8, num_gpu_blocks=64),
        vllm_version="0.20",
    ).validate()


def _record(sessions: sessionmaker[Session]) -> None:
    """A session on the re-run's own clock discipline (a virtual clock advanced by each
    step's runner time; idle, it jumps to the next arrival), arrivals spread over its
    whole length, and the budget and seq slots cut before step CHANGE_STEP."""
    rng = random.Random(7)
    hub = EventHub()
    recorder = Recorder(hub, sessions)
    config, runner, clock = _config(), SimRunner(), VirtualClock()
    open_sim_session(hub, SID, "knob changes", config, runner)
    engine = Engine(config, runner, HubPublisher(hub, SID), clock=clock)
    shared = [rng.randint(3, 258) for _ in range(16)]
    arrivals = []
    t = 0.0
    for i in range(60):
        t += rng.expovariate(1 / 0.004)
        prompt = shared + [rng.randint(3, 258) for _ in range(rng.randint(4, 90))]
        arrivals.append((t, f"r{i}", prompt, rng.randint(2, 30)))
    i = 0
    while i < len(arrivals) or engine.has_unfinished_requests():
        if not engine.has_unfinished_requests():
            clock.jump_to(arrivals[i][0])
        if engine.step_index == CHANGE_STEP and engine.config_version == 0:
            engine.update_config(**CHANGES)
        while i < len(arrivals) and arrivals[i][0] <= clock.now:
            at, req, prompt, max_tokens = arrivals[i]
            engine.add_request(req, prompt, SamplingParams(max_tokens=max_tokens), 0, at)
            i += 1
        if engine.has_unfinished_requests():
            engine.step()  # advances the clock by the step's runner time
    assert engine.step_index > CHANGE_STEP + 20  # the change mattered for a while
    hub.close_session(SID)
    asyncio.run(recorder.flush())
    assert recorder.lag == 0 and recorder.failures == 0, recorder.last_error


@pytest.fixture(scope="module")
def recording(new_database: NewUrl) -> Iterator[tuple[sessionmaker[Session], str]]:
    url = new_database()
    for sessions in open_sessions(url):
        _record(sessions)
        yield sessions, url


def _frames(sessions: sessionmaker[Session], sid: str) -> list[tuple[str, dict[str, Any]]]:
    with sessions() as db:
        out = []
        for _seq, text in iter_frames(db, sid):
            frame = json.loads(text)
            out.append((frame["type"], frame["data"]))
        return out


def _decisions(frames: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """What the scheduler decided at each step, under which budget; arrivals; knob
    changes (not times: the re-run's t are its own clock's)."""
    out: list[Any] = []
    for kind, d in frames:
        if kind == "iteration":
            out.append(
                (
                    d["step"],
                    [(r["req"], r["n"], r["start"]) for r in d["scheduled"]],
                    d["new"],
                    d["resumed"],
                    [p["req"] for p in d["preempted"]],
                    [f["req"] for f in d["finished"]],
                    d["arrived"],
                    (d["budget"]["max_tokens"], d["budget"]["max_seqs"]),
                )
            )
        elif kind == "config":
            out.append(("config", d["step"], d["changes"]))
    return out


def _budgets(frames: list[tuple[str, dict[str, Any]]]) -> dict[int, tuple[int, int]]:
    return {
        d["step"]: (d["budget"]["max_tokens"], d["budget"]["max_seqs"])
        for kind, d in frames
        if kind == "iteration"
    }


def _rerun(url: str, body: dict[str, Any]) -> str:
    live, server, thread = start_server(database_url=url)
    try:
        with httpx.Client(base_url=live.url, timeout=300,
                          headers={"Authorization": f"Bearer {TOKEN}"}) as c:  # fmt: skip
            r = c.post(f"/api/sessions/{SID}/rerun", json=body)
            assert r.status_code == 200, r.text
            return str(r.json()["session"])
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_rerun_changes_knobs_where_the_recording_did(
    recording: tuple[sessionmaker[Session], str],
) -> None:
    sessions, url = recording
    with sessions() as db:
        recorded = load_knob_changes(db, SID)
    assert [(k.step, k.changes) for k in recorded] == [(CHANGE_STEP, CHANGES)]
    original = _frames(sessions, SID)
    budgets = _budgets(original)
    assert budgets[CHANGE_STEP - 1] == (128, 4) and budgets[CHANGE_STEP] == (48, 8)
    new = _rerun(url, {})
    again = _frames(sessions, new)
    assert _budgets(again) == budgets
    assert _decisions(again) == _decisions(original)
    # The recording's first step under the change began at the change's replay time.
    start = next(d["t_start"] for k, d in original if k == "iteration" and d["step"] == 40)
    assert recorded[0].t == pytest.approx(start)


def test_a_knob_given_to_the_rerun_holds_throughout(
    recording: tuple[sessionmaker[Session], str],
) -> None:
    sessions, url = recording
    new = _rerun(url, {"max_num_seqs": 2})
    frames = _frames(sessions, new)
    budgets = _budgets(frames)
    assert {seqs for _tokens, seqs in budgets.values()} == {2}  # never the recorded 4 or 8
    # The other recorded change still happens, at the time the recording made it.
    changes = [(d["step"], d["changes"]) for k, d in frames if k == "config"]
    assert len(changes) == 1 and changes[0][1] == {"max_num_batched_tokens": 48}
    assert {t for step, (t, _s) in budgets.items() if step < changes[0][0]} == {128}
    assert {t for step, (t, _s) in budgets.items() if step >= changes[0][0]} == {48}
    assert max(len(d["scheduled"]) for k, d in frames if k == "iteration") <= 2
