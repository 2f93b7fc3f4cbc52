"""A simulated session on its virtual clock times a step like a torch session times it on
the wall: the step lasts its runner time, and the tokens it samples exist at its end. So a
request whose whole prompt is prefilled in one step has a TTFT of that step's duration
(its modelled time), never 0: on a virtual clock (a scenario run with a sink, a re-run)
and live, on the wall clock of a realtime simulation."""

from __future__ import annotations

import time

import pytest

from app.records.rerun import Arrival, rerun_events
from engine.commands import AddRequest
from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.engine import Engine
from engine.engine_core import EngineCore
from engine.events import IterationEvent, ListSink, RequestEvent
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from engine.scenario import parse_scenario
from engine.simulate import run_scenario
from protocol.codes import RequestMark


def _first_token_latency(sink: ListSink, req: str) -> tuple[float, IterationEvent]:
    marks = {e.kind: e for e in sink.events if isinstance(e, RequestEvent) and e.req_id == req}
    first = marks[RequestMark.FIRST_TOKEN]
    step = next(e for e in sink.iterations() if e.step == first.step)
    return first.t - marks[RequestMark.ARRIVED].t, step


def test_one_step_prefill_ttft_is_the_step_time_in_a_scenario_run() -> None:
    data = {
        "config": {"max_num_batched_tokens": 64, "max_num_seqs": 2},
        "requests": [
            {"id": "a", "arrival_time_ms": 5.0, "prompt_len": 20, "max_tokens": 3},
        ],
    }
    sink = ListSink()
    run_scenario(parse_scenario(data), sink=sink)
    ttft, step = _first_token_latency(sink, "a")
    assert step.forward_ms > 0
    assert step.duration == pytest.approx(step.forward_ms / 1000.0)
    assert ttft == pytest.approx(step.forward_ms / 1000.0)
    # The next step starts where this one ended: the clock is not advanced twice.
    nxt = next(e for e in sink.iterations() if e.step == step.step + 1)
    assert nxt.t_start == pytest.approx(step.t_start + step.duration)


def test_one_step_prefill_ttft_is_the_step_time_in_a_rerun() -> None:
    config = EngineConfig(
        SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=2, max_model_len=256),
        CacheConfig(block_size=8, num_gpu_blocks=32),
    ).validate()
    arrivals = [Arrival(0.25, "a", list(range(3, 23)), SamplingParams(max_tokens=3), 0)]
    sink = ListSink()
    rerun_events(config, arrivals, "sim", sink)
    ttft, step = _first_token_latency(sink, "a")
    assert step.forward_ms > 0
    assert ttft == pytest.approx(step.forward_ms / 1000.0)
    assert ttft > 0


def test_one_step_prefill_ttft_includes_the_step_time_live() -> None:
    """A realtime simulation on the wall clock (a live sim session): the modelled step
    time is waited out inside the step, so the step's duration and the TTFT include it."""
    sink = ListSink()
    config = EngineConfig(
        SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=2, max_model_len=256),
        CacheConfig(block_size=8, num_gpu_blocks=32),
    ).validate()
    core = EngineCore(Engine(config, SimRunner(), sink), realtime=True)
    core.start()
    try:
        add = AddRequest("a", list(range(3, 23)), SamplingParams(max_tokens=3))
        assert core.submit(add).result(timeout=10) is None
        deadline = time.monotonic() + 30
        while not any(
            isinstance(e, RequestEvent) and e.kind == RequestMark.FINISHED for e in sink.events
        ):
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        core.stop()
    ttft, step = _first_token_latency(sink, "a")
    assert step.forward_ms > 0
    assert step.duration >= step.forward_ms / 1000.0
    assert ttft >= step.forward_ms / 1000.0
