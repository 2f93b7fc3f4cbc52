"""`stream_scenario` writes the step-by-step result as the run goes (engine.result_json):
the file loads to exactly run_scenario's in-memory result, on every shipped scenario
(async, speculative decoding, preemption, priority, prefix hits, a scheduler failure), on
a trace with idle gaps and on a run cut short; and the result's request records agree
with the engine's own events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.events import ListSink
from engine.mooncake import parse_trace, trace_scenario
from engine.result_fold import follow_waiting, step_record
from engine.scenario import Scenario, load_scenario, parse_scenario
from engine.simulate import (
    format_table,
    record_scenario,
    run_scenario,
    stream_scenario,
    table_line,
)
from protocol.codes import RequestMark
from tools.gen_trace import generate_trace

SCENARIOS = sorted((Path(__file__).parents[2] / "scenarios").glob("*.json"))
FAULT = Path(__file__).parent / "spec_threshold_fault.json"


def _streamed(scenario: Scenario, path: Path) -> tuple[dict[str, Any], list[str]]:
    lines: list[str] = []
    with path.open("w", encoding="utf-8") as fh:
        summary = stream_scenario(scenario, fh, on_step=lambda r: lines.append(table_line(r)))
    with path.open(encoding="utf-8") as fh:
        loaded = json.load(fh)
    assert summary == {k: v for k, v in loaded.items() if k not in ("steps", "requests")}
    return loaded, lines


def _untimed(result: dict[str, Any]) -> dict[str, Any]:
    """The result less `timing` (the scheduler's wall time, different on every run)."""
    return {k: v for k, v in result.items() if k != "timing"}


def _check(scenario: Scenario, tmp_path: Path) -> dict[str, Any]:
    sink = ListSink()
    whole = run_scenario(scenario, sink=sink)
    streamed, lines = _streamed(scenario, tmp_path / "r.json")
    assert _untimed(streamed) == _untimed(whole)
    assert set(streamed["timing"]) == {"median_step_us", "p90_step_us"}
    assert format_table(whole).splitlines()[1 : 1 + len(lines)] == lines
    # The records agree with the engine's events, read here on their own.
    assert whole["num_steps"] == len(sink.iterations())
    marks: dict[str, dict[str, Any]] = {r.id: {} for r in scenario.requests}
    for ev in sink.request_events():
        m = marks[ev.req_id]
        if ev.kind == RequestMark.SCHEDULED:
            m.setdefault("first_scheduled_step", ev.step)
        elif ev.kind == RequestMark.PREEMPTED:
            m["num_preemptions"] = m.get("num_preemptions", 0) + 1
        elif ev.kind in (RequestMark.FINISHED, RequestMark.REJECTED, RequestMark.ABORTED):
            m["finish_step"] = ev.step
    for req_id, m in marks.items():
        rec = whole["requests"][req_id]
        assert rec["first_scheduled_step"] == m.get("first_scheduled_step")
        assert rec["num_preemptions"] == m.get("num_preemptions", 0)
        assert rec["finish_step"] == m.get("finish_step")
    accepted = sum(sum(ev.accepted_tokens.values()) for ev in sink.iterations())
    assert whole["total_accepted_tokens"] == accepted
    return whole


@pytest.mark.parametrize("path", [*SCENARIOS, FAULT], ids=[p.stem for p in [*SCENARIOS, FAULT]])
def test_streamed_result_equals_the_in_memory_result(path: Path, tmp_path: Path) -> None:
    _check(load_scenario(path), tmp_path)


@pytest.mark.parametrize("overrides", [{}, {"async_scheduling": True},
                                       {"num_gpu_blocks": 200, "max_steps": 300}])  # fmt: skip
def test_streamed_result_equals_the_in_memory_result_on_a_trace(
    overrides: dict[str, Any], tmp_path: Path
) -> None:
    lines = [json.dumps(r) for r in generate_trace(120, 600.0, 6000, 800, 20, 60, seed=8)]
    data = trace_scenario(parse_trace(lines, 512), 512)
    data["config"].update(overrides)
    whole = _check(parse_scenario(data), tmp_path)
    assert any("idle_ms" in s for s in whole["steps"])
    if "max_steps" in overrides:
        assert not whole["complete"] and whole["stopped"]["unfinished"] > 0
        never = [r for r in whole["requests"].values() if r["first_scheduled_step"] is None]
        assert never  # requests never scheduled still have their (empty) records


def test_an_empty_run_writes_a_loadable_result(tmp_path: Path) -> None:
    data = json.loads(SCENARIOS[0].read_text())
    data["requests"] = []
    scenario = parse_scenario(data)
    streamed, lines = _streamed(scenario, tmp_path / "r.json")
    assert _untimed(streamed) == _untimed(run_scenario(scenario))
    assert streamed["steps"] == [] and streamed["requests"] == {} and lines == []


@pytest.mark.parametrize("path", [*SCENARIOS, FAULT], ids=[p.stem for p in [*SCENARIOS, FAULT]])
def test_record_scenario_keeps_the_same_run_as_events(path: Path) -> None:
    """A lab point opened as a session keeps the events only (record_scenario): the same
    steps, request marks and ending as run_scenario, with no result built beside them."""
    scenario = load_scenario(path)
    whole = run_scenario(scenario)
    sink = ListSink()
    summary = record_scenario(scenario, None, sink)
    assert summary == {k: whole[k] for k in ("complete", "stopped", "failure") if k in whole}
    steps = [{k: v for k, v in s.items() if k != "idle_ms"} for s in whole["steps"]]
    waiting: dict[str, None] = {}
    records = []
    for ev in sink.iterations():
        follow_waiting(waiting, ev)
        records.append(step_record(ev, waiting))
    assert records == steps
    finished = {e.req_id: e.step for e in sink.request_events() if e.kind == RequestMark.FINISHED}
    assert finished == {
        k: r["finish_step"]
        for k, r in whole["requests"].items()
        if r["finish_reason"] in ("stop", "length")
    }
