"""Figures folded from a run's events as they come (engine.run_aggregate, what a sweep
point keeps) equal engine.run_metrics over the whole step-by-step result, on every shipped
scenario (async, speculative decoding, preemption, priority, prefix hits) and on traces
with idle gaps."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from engine.engine import Engine
from engine.events import IterationEvent, ListSink
from engine.mooncake import parse_trace, trace_scenario
from engine.run_metrics import run_metrics
from engine.runner.sim import SimRunner
from engine.scenario import Scenario, load_scenario, parse_scenario
from engine.simulate import drive, run_scenario, run_scenario_metrics
from engine.virtual_clock import VirtualClock
from tools.gen_trace import generate_trace

SCENARIOS = sorted((Path(__file__).parents[2] / "scenarios").glob("*.json"))


def _usable(scenario: Scenario) -> int:
    cache = scenario.config.cache
    return cache.kv_block_limit or cache.num_usable_blocks


def _both(scenario: Scenario) -> tuple[dict, dict]:
    whole = run_scenario(scenario)
    folded = run_scenario_metrics(scenario)
    return whole, folded


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_folded_figures_equal_the_full_results_on_shipped_scenarios(path: Path) -> None:
    scenario = load_scenario(path)
    whole, folded = _both(scenario)
    assert folded["metrics"] == run_metrics(whole, _usable(scenario))
    assert folded["complete"] == whole["complete"]


@pytest.mark.parametrize("overrides", [{}, {"async_scheduling": True},
                                       {"num_gpu_blocks": 200, "max_steps": 400}])  # fmt: skip
def test_folded_figures_equal_the_full_results_on_a_trace(overrides: dict) -> None:
    lines = [json.dumps(r) for r in generate_trace(150, 600.0, 6000, 800, 20, 60, seed=8)]
    data = trace_scenario(parse_trace(lines, 512), 512)
    data["config"].update(overrides)
    scenario = parse_scenario(data)
    whole, folded = _both(scenario)
    assert folded["metrics"] == run_metrics(whole, _usable(scenario))
    assert folded.get("stopped") == whole.get("stopped")
    reasons = folded["finish_reasons"]
    assert sum(reasons.values()) == sum(
        1 for _ in (r for r in whole["requests"].values() if "arrival_ms" in r)
    )
    if folded["complete"]:
        assert set(reasons) <= {"length", "rejected"}
    else:
        assert folded["stopped"]["unfinished"] > 0


def test_every_request_is_counted_finished_rejected_or_aborted() -> None:
    """A point says how many requests it rejected (prompts past max_model_len here), not
    only how many finished: together they are the trace's, or the run was cut short."""
    lines = [json.dumps(r) for r in generate_trace(150, 600.0, 6000, 800, 20, 60, seed=8)]
    data = trace_scenario(parse_trace(lines, 512), 512)
    data["config"]["max_model_len"] = 3000
    scenario = parse_scenario(data)
    whole, folded = _both(scenario)
    metrics = folded["metrics"]
    assert metrics == run_metrics(whole, _usable(scenario))
    reasons = folded["finish_reasons"]
    assert metrics["requests_rejected"] == reasons["rejected"] > 0
    assert metrics["requests_aborted"] == 0
    assert folded["complete"]
    assert metrics["requests_finished"] + metrics["requests_rejected"] == 150


def _events(scenario: Scenario, kv_changes: bool) -> list[IterationEvent]:
    sink, clock = ListSink(), VirtualClock()
    engine = Engine(scenario.config, SimRunner(), sink, clock=clock, kv_changes=kv_changes)
    drive(scenario, engine, clock, True, None, lambda *_: None, lambda *_: None)
    return [e for e in sink.events if isinstance(e, IterationEvent)]


def test_a_run_without_block_changes_decides_the_same_steps() -> None:
    """A metrics run leaves the events' kv_changes empty (no KV map reads them); every
    other field of every step is what the run that lists them decides."""
    lines = [json.dumps(r) for r in generate_trace(120, 5.0, 6000, 800, 20, 60, seed=4)]
    data = trace_scenario(parse_trace(lines, 512), 512)
    data["config"].update({"num_gpu_blocks": 450, "max_num_seqs": 64, "max_steps": 3000})
    scenario = parse_scenario(data)
    listed, unlisted = _events(scenario, True), _events(scenario, False)
    assert len(listed) == len(unlisted) > 100
    assert sum(len(e.kv_changes) for e in listed) > 0
    assert all(e.kv_changes == () for e in unlisted)
    assert sum(len(e.preempted) for e in listed) > 0
    for a, b in zip(listed, unlisted, strict=True):
        # (overhead_us is the host's own time spent scheduling: measured, never equal)
        assert replace(a, kv_changes=(), overhead_us=0.0) == replace(b, overhead_us=0.0)
