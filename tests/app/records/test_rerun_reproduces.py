"""A re-run with no change reproduces its recording (issue 31): the shipped scenarios
kv_pressure, shared_prefixes and long_prompt_vs_decodes, recorded live-style (the
scenario's arrivals played in by the live engine's before-step hook, steps on the wall
clock) on the SimRunner and on the torch runner, in the three engine loops (sync; async
scheduling with the batch queue of 2; speculative decoding), re-run through the real
route (POST /api/sessions/ID/rerun {}, the re-run in its own engine process) decide
exactly as recorded, step by step. A re-run with one knob changed follows the recording
up to the step where that knob first changes a decision, and keeps its runner and clock.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.db.migrate import upgrade
from app.db.queries import iter_frames
from app.live.hub import EventHub
from app.nodes.scenarios import ScenarioArrivals, load_named_scenario
from app.records.recorder import Recorder
from engine.engine import Engine
from engine.runner import make_runner
from tests.app.records.conftest import open_sessions
from tests.app.records.helpers import HubPublisher
from tests.conftest import TOKEN, start_server

SCENARIOS = ("kv_pressure", "shared_prefixes", "long_prompt_vs_decodes")
LOOPS: dict[str, dict[str, Any]] = {
    "sync": {},
    "async": {"async_scheduling": True},
    "spec": {"num_speculative_tokens": 3},
}
CASES = [(runner, s, loop) for runner in ("sim", "torch") for s in SCENARIOS for loop in LOOPS]
Frames = list[tuple[str, dict[str, Any]]]


def record_scenario(
    sessions: sessionmaker[Session], sid: str, name: str, runner_kind: str, loop: str
) -> None:
    """`name` as the live engine plays it (ScenarioArrivals before each step, the wall
    clock), recorded through the hub like a live session."""
    scenario = load_named_scenario(name)
    config = scenario.config.with_updates(**LOOPS[loop])
    runner = make_runner(runner_kind, config)
    hub = EventHub()
    recorder = Recorder(hub, sessions)
    describe = runner.describe()
    hub.open_session(
        sid,
        {
            "name": f"{name} {loop}",
            "source": "local",
            "runner": runner.name,
            "simulated": runner.simulated,
            "model": str(describe.get("model", "")),
            "device": str(describe.get("device", "")),
            "describe": describe,
            "config": config.as_dict(),
            "started_at": time.time(),
        },
    )
    engine = Engine(config, runner, HubPublisher(hub, sid), clock=time.perf_counter)
    arrivals = ScenarioArrivals(scenario)
    while engine.step_index < scenario.max_steps:
        arrivals(engine)
        if engine.has_unfinished_requests():
            engine.step()
        elif not arrivals.by_step and not arrivals.timed:
            break
    hub.close_session(sid)
    asyncio.run(recorder.flush())
    assert recorder.lag == 0 and recorder.failures == 0, recorder.last_error


def frames_of(sessions: sessionmaker[Session], sid: str) -> Frames:
    with sessions() as db:
        return [(f["type"], f["data"]) for f in (json.loads(t) for _, t in iter_frames(db, sid))]


def plans(frames: Frames) -> list[Any]:
    """Per step: members (req, n, start, drafts), preempted, finished, arrived."""
    return [
        (
            d["step"],
            [(r["req"], r["n"], r["start"], r.get("spec", 0)) for r in d["scheduled"]],
            [p["req"] for p in d["preempted"]],
            [f["req"] for f in d["finished"]],
            d["arrived"],
        )
        for kind, d in frames
        if kind == "iteration"
    ]


def meta_of(sessions: sessionmaker[Session], sid: str) -> dict[str, Any]:
    from app.db.models import SessionRecord

    with sessions() as db:
        rec = db.get(SessionRecord, sid)
        assert rec is not None
        return dict(rec.meta or {})


@pytest.fixture(scope="module")
def database(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[sessionmaker[Session], str]]:
    url = f"sqlite:///{Path(tmp_path_factory.mktemp('reproduce')) / 'rec.db'}"
    upgrade(url)
    for sessions in open_sessions(url):
        for runner, scenario, loop in CASES:
            record_scenario(sessions, f"s-{runner}-{scenario}-{loop}", scenario, runner, loop)
        yield sessions, url


@pytest.fixture(scope="module")
def client(database: tuple[sessionmaker[Session], str]) -> Iterator[httpx.Client]:
    live, server, thread = start_server(database_url=database[1])
    try:
        with httpx.Client(
            base_url=live.url, timeout=300, headers={"Authorization": f"Bearer {TOKEN}"}
        ) as c:
            yield c
    finally:
        server.should_exit = True
        thread.join(10)


def rerun(client: httpx.Client, sid: str, body: dict[str, Any]) -> str:
    r = client.post(f"/api/sessions/{sid}/rerun", json=body)
    assert r.status_code == 200, r.text
    return str(r.json()["session"])


@pytest.mark.parametrize(("runner", "scenario", "loop"), CASES)
def test_a_rerun_with_no_change_decides_as_recorded(
    database: tuple[sessionmaker[Session], str],
    client: httpx.Client,
    runner: str,
    scenario: str,
    loop: str,
) -> None:
    sessions, _ = database
    sid = f"s-{runner}-{scenario}-{loop}"
    recorded = plans(frames_of(sessions, sid))
    assert len(recorded) > 10
    again = plans(frames_of(sessions, rerun(client, sid, {})))
    first = next((i for i, (a, b) in enumerate(zip(recorded, again, strict=False)) if a != b), None)
    assert first is None, f"differs from step {first}: {recorded[first]} != {again[first]}"
    assert len(again) == len(recorded)
    meta = meta_of(sessions, rerun(client, sid, {}))
    assert meta["runner"] == "recorded" and meta["source_runner"] == runner


def test_one_knob_changed_differs_only_from_where_it_changes_a_decision(
    database: tuple[sessionmaker[Session], str], client: httpx.Client
) -> None:
    """kv_pressure (torch, sync) with a larger KV pool: identical until the first step
    where the recording preempted, and on the recording's runner and clock."""
    sessions, _ = database
    sid = "s-torch-kv_pressure-sync"
    original = frames_of(sessions, sid)
    recorded = plans(original)
    first_preempt = next(i for i, p in enumerate(recorded) if p[2])
    new = rerun(client, sid, {"num_gpu_blocks": 60})
    changed = frames_of(sessions, new)
    again = plans(changed)
    first = next(i for i, (a, b) in enumerate(zip(recorded, again, strict=False)) if a != b)
    assert first == first_preempt
    assert not any(p[2] for p in again)  # never preempts with room for all
    # Up to the divergence each step ran on the recording's clock.
    times = {d["step"]: d["t_start"] for k, d in original if k == "iteration"}
    for kind, d in changed:
        if kind == "iteration" and d["step"] <= first:
            assert d["t_start"] == pytest.approx(times[d["step"]], abs=1e-9)
    meta = meta_of(sessions, new)
    assert meta["runner"] == "recorded" and meta["source_runner"] == "torch"
    assert meta["rerun_changes"] == {"num_gpu_blocks": 60}


def test_compare_names_every_difference_of_setup(
    database: tuple[sessionmaker[Session], str], client: httpx.Client
) -> None:
    """The compare API and page list runner, model, device, release, clock, workload and
    knobs of both sides, and say in words whether the numbers compare like for like."""
    a = "s-torch-kv_pressure-sync"

    def setup(b: str) -> dict[str, Any]:
        r = client.get("/api/compare", params={"a": a, "b": b})
        assert r.status_code == 200, r.text
        data: dict[str, Any] = r.json()["setup"]
        return data

    def differing(data: dict[str, Any]) -> set[str]:
        return {row["key"] for row in data["rows"] if row["differs"]}

    # The default re-run with one knob changed: only that knob differs.
    knob = setup(rerun(client, a, {"num_gpu_blocks": 60}))
    assert differing(knob) == {"knobs"} and knob["like_for_like"]
    assert knob["verdict"] == "Like for like: only the knobs differ (num_gpu_blocks)."
    rows = {row["key"]: row for row in knob["rows"]}
    assert rows["knobs"]["a"] == "num_gpu_blocks=25" and rows["knobs"]["b"] == "num_gpu_blocks=60"
    assert rows["model"]["a"] == rows["model"]["b"] != "not recorded"
    assert rows["runner"]["b"].startswith("torch (re-run on its recorded steps")
    # The same knob on the SimRunner: the runner and the clock differ too, said so.
    sim_b = rerun(client, a, {"runner": "sim", "num_gpu_blocks": 60})
    sim = setup(sim_b)
    assert {"runner", "clock", "knobs", "model"} <= differing(sim)
    assert "workload" not in differing(sim) and "release" not in differing(sim)
    assert not sim["like_for_like"] and sim["verdict"].startswith("Not like for like")
    assert "runner" in sim["verdict"] and "clock" in sim["verdict"]
    assert any("SimRunner's cost model" in n for n in sim["notes"])
    # The model run again for real, no knob changed: the wall clock is why it differs.
    torch_b = rerun(client, a, {"runner": "torch"})
    again = setup(torch_b)
    assert "knobs" not in differing(again)
    assert any("wall clock" in n and "even with no knob changed" in n for n in again["notes"])
    # Another recording (the SimRunner's) of the same scenario: same workload.
    other = setup("s-sim-kv_pressure-sync")
    assert {"runner", "clock", "model"} <= differing(other)
    assert "workload" not in differing(other) and "knobs" not in differing(other)
    # The page says the same in words.
    page = client.get("/compare", params={"a": a, "b": sim_b})
    assert page.status_code == 200
    assert 'id="setup-verdict"' in page.text and "Not like for like" in page.text
    assert 'data-setup="clock" class="differs"' in page.text
