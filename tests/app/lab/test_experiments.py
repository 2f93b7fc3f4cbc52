"""The ready experiments are valid sweeps, and a point opened as a session is that run:
the same steps and, on the runner's clock, the same timing."""

from __future__ import annotations

import pytest

from app.lab.experiments import experiments, get_experiment
from app.lab.point_session import point_events
from engine.events import IterationEvent
from engine.sweep import run_point
from engine.sweep_pool import run_sweep

EXPECTED = {
    "s6_chunk_size", "s1_static_vs_continuous", "poisson_static_vs_continuous",
    "kv_pool_size", "reserve_full_isl", "async_scheduling", "draft_length", "vllm_releases",
}  # fmt: skip


def test_every_experiment_is_a_valid_sweep_with_an_explanation() -> None:
    assert {e.name for e in experiments()} == EXPECTED
    for exp in experiments():
        spec = exp.spec()
        assert spec.points(), exp.name
        assert len(exp.explanation) > 100 and exp.chart["metric"], exp.name
    s6 = get_experiment("s6_chunk_size").spec()
    assert s6.cost_model == "h100:llama-3-8b"
    assert s6.knobs[0].values[0] == 256 and s6.knobs[0].values[-1] == 4096
    assert len(get_experiment("draft_length").spec().knobs[0].values) == 7


def test_section_1_static_batching_pads_and_takes_more_steps() -> None:
    spec = get_experiment("s1_static_vs_continuous").spec()
    cont, static = run_sweep(spec.base, spec.knobs, workers=1)
    assert cont.point.knobs == {"batching": "continuous"}
    assert static.metrics["padding_tokens"] == 32 + 2 * 6  # the article's example
    assert cont.metrics["padding_tokens"] == 0
    assert static.metrics["steps"] > cont.metrics["steps"]


def test_the_releases_experiment_shows_where_0_33_decides_otherwise() -> None:
    """Under KV pressure the two releases' schedules part (block reuse order, lone-request
    cap); with room to spare neither preempts."""
    spec = get_experiment("vllm_releases").spec()
    runs = {
        (r.point.knobs["vllm_version"], r.point.knobs["num_gpu_blocks"]): r.metrics
        for r in run_sweep(spec.base, spec.knobs, workers=1)
    }
    for blocks in (150, 300):
        old, new = runs[("0.20", blocks)], runs[("0.33", blocks)]
        assert (old["steps"], old["preemptions"]) != (new["steps"], new["preemptions"])
        assert old["preemptions"] > 0 and new["preemptions"] > 0
    assert runs[("0.20", 600)]["preemptions"] == runs[("0.33", 600)]["preemptions"] == 0


@pytest.mark.parametrize("name", ["s1_static_vs_continuous", "kv_pool_size"])
def test_a_point_opened_as_a_session_is_that_run(name: str) -> None:
    spec = get_experiment(name).spec()
    res = run_point(spec.base, spec.points()[-1], spec.runner, spec.cost_model)
    _, events = point_events(spec.base, res.point, spec.runner, spec.cost_model)
    steps = [e for e in events if isinstance(e, IterationEvent)]
    assert len(steps) == res.metrics["steps"]
    # Events are timed on the runner's clock: the last step ends at the run's duration.
    end_s = steps[-1].t_start + steps[-1].forward_ms / 1000.0
    assert end_s == pytest.approx(res.metrics["duration_s"], abs=1e-6)
