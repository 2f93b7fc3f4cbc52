"""EngineCore in its own thread: commands, pause / single step, events."""

from __future__ import annotations

import time

import pytest

from engine.commands import AddRequest, Pause, Resume, Step, UpdateConfig
from engine.config import ConfigError
from engine.engine import Engine
from engine.engine_core import EngineCore
from engine.events import ListSink
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from tests.engine.helpers import make_config


def _wait(predicate, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return False


@pytest.fixture
def core():  # type: ignore[no-untyped-def]
    sink = ListSink()
    c = EngineCore(Engine(make_config(), SimRunner(), sink), realtime=False)
    c.start()
    yield c, sink
    c.stop()
    assert c.error is None


def test_requests_submitted_from_another_thread_run_to_completion(core) -> None:  # type: ignore[no-untyped-def]
    c, sink = core
    futures = [
        c.submit(AddRequest(f"r{i}", list(range(1, 10 + i)), SamplingParams(max_tokens=5)))
        for i in range(4)
    ]
    assert [f.result(timeout=5) for f in futures] == [None] * 4
    assert _wait(lambda: sum(1 for e in sink.request_events() if e.kind == "finished") == 4)
    steps = [e.step for e in sink.iterations()]
    assert steps == list(range(len(steps)))


def test_pause_then_single_step_advances_exactly_one_step(core) -> None:  # type: ignore[no-untyped-def]
    c, sink = core
    c.submit(Pause()).result(timeout=5)
    c.submit(AddRequest("long", list(range(1, 30)), SamplingParams(max_tokens=50))).result(5)
    time.sleep(0.1)
    assert sink.iterations() == []
    c.submit(Step()).result(timeout=5)
    assert _wait(lambda: len(sink.iterations()) == 1)
    time.sleep(0.1)
    assert len(sink.iterations()) == 1
    assert c.paused and c.engine.step_index == 1
    c.submit(Resume()).result(timeout=5)
    assert _wait(lambda: any(e.kind == "finished" for e in sink.request_events()))


def test_invalid_knob_change_is_refused_with_the_vllm_rule(core) -> None:  # type: ignore[no-untyped-def]
    c, _ = core
    future = c.submit(UpdateConfig({"max_num_seqs": 1000}))
    with pytest.raises(ConfigError) as info:
        future.result(timeout=5)
    assert info.value.field == "max_num_batched_tokens"
    ok = c.submit(UpdateConfig({"max_num_batched_tokens": 32})).result(timeout=5)
    assert ok.scheduler.max_num_batched_tokens == 32


def test_stopping_aborts_what_is_in_flight_at_the_last_step() -> None:
    """A session stopped with requests running and waiting (a new session, `serve` ending)
    records each as aborted at the last step that ran, as vLLM's engine core aborts them
    at a stop; finished ones keep their own end."""
    sink = ListSink()
    c = EngineCore(Engine(make_config(max_num_seqs=2), SimRunner(), sink), realtime=False)
    c.start()
    try:
        c.submit(Pause()).result(timeout=5)
        for i in range(4):  # two run, two wait for a seq slot
            c.submit(AddRequest(f"r{i}", list(range(1, 30)), SamplingParams(max_tokens=200)))
        c.submit(Step(3)).result(timeout=5)
        assert _wait(lambda: len(sink.iterations()) == 3)
        c.submit(AddRequest("late", list(range(1, 30)), SamplingParams(max_tokens=5))).result(5)
    finally:
        c.stop()
    assert c.error is None
    last = sink.iterations()[-1]
    assert (last.step, last.num_running_end, last.num_waiting_end) == (2, 2, 2)
    aborted = [e for e in sink.request_events() if e.kind == "aborted"]
    assert sorted(e.req_id for e in aborted) == ["late", "r0", "r1", "r2", "r3"]
    for e in aborted:
        assert (e.step, e.detail["reason"]) == (2, "abort"), e
    arrived = {e.req_id: e.t for e in sink.request_events() if e.kind == "arrived"}
    assert all(e.t >= arrived[e.req_id] for e in aborted)
    assert not [e for e in sink.request_events() if e.kind == "finished"]
