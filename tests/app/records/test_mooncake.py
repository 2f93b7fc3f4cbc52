"""Mooncake traces through the whole tool on real databases (SQLite file, PostgreSQL):
`batchscope import-trace` -> a simulated run recorded like any session -> `batchscope
export --format mooncake` and GET /api/sessions/{id}/export?format=mooncake give back
the generated trace (thousands of requests with shared prefixes) row for row. Bad traces:
exit 2 naming the line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.cli.main import main
from app.live.hub import EventHub
from app.records.recorder import Recorder
from app.records.rerun import load_arrivals, publish_closed_session, recorded_release, rerun_events
from engine.config import EngineConfig
from engine.events import ListSink
from engine.runner.sim import SimRunner
from engine.scenario import Scenario, load_scenario
from engine.simulate import run_scenario
from protocol.session import session_meta
from tests.app.records.conftest import NewUrl, open_sessions
from tests.conftest import TOKEN, cli, start_server
from tests.engine.trace_gen import generate_trace, write_trace

B = 32
N = 2000


def _url(sessions: sessionmaker[Session]) -> str:
    return str(sessions.kw["bind"].url.render_as_string(hide_password=False))


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_trace(tmp_path_factory.mktemp("trace") / "trace.jsonl", generate_trace(N, B))


@pytest.fixture(scope="module")
def simulation(
    trace_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Scenario, ListSink]:
    """import-trace (the CLI, in a process of its own), then the scenario simulated."""
    scenario_file = tmp_path_factory.mktemp("scenario") / "trace.json"
    done = cli("import-trace", str(trace_file), "--block-tokens", str(B), "--out",
               str(scenario_file), timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"{N} requests written" in done.stderr
    scenario = load_scenario(scenario_file)
    sink = ListSink()
    run_scenario(scenario, SimRunner(), sink)
    return scenario, sink


@pytest.fixture(scope="module")
def simulated(
    new_database: NewUrl, simulation: tuple[Scenario, ListSink]
) -> Iterator[tuple[sessionmaker[Session], str]]:
    """The simulated trace recorded as a closed session, as the lab records a point."""
    scenario, sink = simulation
    for sessions in open_sessions(new_database()):
        hub = EventHub()
        recorder = Recorder(hub, sessions)
        meta = session_meta("trace", "lab", runner="sim", simulated=True,
                            config=scenario.config.as_dict())  # fmt: skip
        sid = publish_closed_session(hub, meta, sink.events)
        asyncio.run(recorder.flush())
        assert recorder.lag == 0 and recorder.failures == 0, recorder.last_error
        yield sessions, sid


def _rows(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_import_simulate_export_gives_back_the_trace(
    simulated: tuple[sessionmaker[Session], str],
    trace_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sessions, sid = simulated
    original = _rows(trace_file.read_text(encoding="utf-8"))
    ids = [h for r in original for h in r["hash_ids"]]  # type: ignore[attr-defined]
    assert len(ids) > 1.5 * len(set(ids))  # shared prefixes: many blocks are shared
    out = tmp_path / "back.jsonl"
    args = ["export", sid, "--format", "mooncake", "--block-tokens", str(B)]
    assert main([*args, "--out", str(out), "--database-url", _url(sessions)]) == 0
    assert f"{N} requests written" in capsys.readouterr().err
    assert _rows(out.read_text(encoding="utf-8")) == original
    # Over HTTP, from a real server on loopback reading the same database.
    live, server, thread = start_server(database_url=_url(sessions))
    try:
        with httpx.Client(base_url=live.url, timeout=60,
                          headers={"Authorization": f"Bearer {TOKEN}"}) as c:  # fmt: skip
            got = c.get(f"/api/sessions/{sid}/export", params={"format": "mooncake",
                                                               "block_tokens": B})  # fmt: skip
            assert got.status_code == 200
            assert "mooncake.jsonl" in got.headers["content-disposition"]
            assert _rows(got.text) == original
            # Other block sizes give other ids, never other timestamps or lengths.
            coarse = _rows(c.get(f"/api/sessions/{sid}/export?format=mooncake").text)
            strip = [{k: v for k, v in r.items() if k != "hash_ids"} for r in original]
            assert [{k: v for k, v in r.items() if k != "hash_ids"} for r in coarse] == strip
            assert c.get("/api/sessions/s-nope/export?format=mooncake").status_code == 404
            bad = c.get(f"/api/sessions/{sid}/export?format=mooncake&block_tokens=0")
            assert bad.status_code == 422
    finally:
        server.should_exit = True
        thread.join(10)


def test_bad_traces_exit_2_naming_the_line(tmp_path: Path) -> None:
    lines = [
        '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]}',
        '{"timestamp": 5, "input_length": 10, "output_length": -2, "hash_ids": [1]}',
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = cli("import-trace", str(bad))
    assert done.returncode == 2
    assert f"{bad}: line 2: output_length: must be at least 1, got -2" in done.stderr
    long = tmp_path / "long.jsonl"
    long.write_text(lines[0] + "\n", encoding="utf-8")
    done = cli("import-trace", str(long), "--max-model-len", "8")
    assert done.returncode == 2
    assert "line 1: input_length 10 + output_length 2 = 12 tokens does not fit " \
        "max_model_len 8" in done.stderr  # fmt: skip
    done = cli("import-trace", str(tmp_path / "absent.jsonl"))
    assert done.returncode == 2 and "cannot read" in done.stderr


def test_a_rerun_replays_arrivals_at_their_recorded_times(
    simulated: tuple[sessionmaker[Session], str], simulation: tuple[Scenario, ListSink]
) -> None:
    """Re-run (app.records.rerun) under the recorded knobs and release: every request
    arrives at the time it arrived in the recording, not at the step that took it."""
    sessions, sid = simulated
    scenario, _sink = simulation
    with sessions() as db:
        meta, arrivals = load_arrivals(db, sid)
        release, _how = recorded_release(db, sid)
    assert len(arrivals) == N
    config = EngineConfig().with_updates(**{**meta["config"], "vllm_version": release})
    assert config == scenario.config
    sink = ListSink()
    rerun_events(config, arrivals, "sim", sink)
    times = {e.req_id: e.t for e in sink.request_events() if e.kind == "arrived"}
    assert times == {a.req_id: a.t for a in arrivals}
    assert [a.t * 1000 for a in arrivals] == pytest.approx(
        [r.arrival_time_ms for r in scenario.requests], abs=1e-6
    )
