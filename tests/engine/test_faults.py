"""A configuration vLLM accepts runs here too, and fails where vLLM's scheduler fails: with
K drafts, a threshold below 1 + K is accepted; a run that pads a new decode which the
threshold then cuts stops at that step, naming vLLM's assertion (engine.faults)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from engine.commands import Resume
from engine.engine import Engine
from engine.engine_core import EngineCore
from engine.events import ListSink
from engine.faults import SchedulerAssertion
from engine.runner.sim import SimRunner
from engine.scenario import load_scenario
from engine.simulate import run_scenario
from tests.conftest import cli

FAULT = Path(__file__).with_name("spec_threshold_fault.json")
ASSERTION = "num_new_tokens == 1 + self.num_spec_tokens"


@pytest.mark.parametrize(("release", "failed_at"), [("0.20", None), ("0.33", 3)])
def test_a_padded_decode_cut_by_the_threshold_stops_the_run(
    release: str, failed_at: int | None
) -> None:
    scenario = load_scenario(FAULT, {"vllm_version": release})
    result = run_scenario(scenario)
    if failed_at is None:
        assert "failure" not in result
        assert result["completed"] == len(scenario.requests)
        return
    assert result["failure"]["step"] == failed_at
    assert result["failure"]["assertion"] == ASSERTION
    assert "cut to 4 by long_prefill_token_threshold 4" in result["failure"]["detail"]
    assert result["num_steps"] == failed_at and result["completed"] == 0


def test_simulate_says_where_it_stopped_and_exits_1(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = cli("simulate", str(FAULT), "--vllm-version", "0.33", "--out", str(out))
    assert proc.returncode == 1, proc.stderr
    assert (
        f"stopped at step 3 as vLLM's engine would: its scheduler fails `assert {ASSERTION}`"
        in (proc.stderr)
    )
    assert json.loads(out.read_text())["failure"]["step"] == 3
    proc = cli("simulate", str(FAULT), "--vllm-version", "0.20", "--out", str(out))
    assert proc.returncode == 0, proc.stderr


def test_a_live_engine_holds_still_and_says_why() -> None:
    scenario = load_scenario(FAULT, {"vllm_version": "0.33"})
    sink = ListSink()
    engine = Engine(scenario.config, SimRunner(), sink)
    told: list[SchedulerAssertion] = []
    done = threading.Event()

    def on_failure(fault: SchedulerAssertion) -> None:
        told.append(fault)
        done.set()

    core = EngineCore(engine, realtime=False, on_failure=on_failure)
    a, b = scenario.requests
    requests_by_step = {0: [a], 3: [b]}

    def add_due(eng: Engine) -> None:
        for req in requests_by_step.pop(eng.step_index, []):
            eng.add_request(req.id, list(req.prompt_token_ids), req.sampling_params)

    core.before_step = add_due
    core.start()
    try:
        assert done.wait(60), "the engine never reached the padded decode"
        assert told[0].step == 3 and told[0].assertion == ASSERTION
        assert engine.step_index == 3 and core.paused
        with pytest.raises(RuntimeError, match="the engine stopped: stopped at step 3"):
            core.submit(Resume()).result(10)
    finally:
        core.stop()
    assert len(sink.iterations()) == 3
