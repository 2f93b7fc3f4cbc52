"""Sweeps: deterministic on the SimRunner, each point equal to a plain simulate run."""

from __future__ import annotations

import pytest

from engine.run_metrics import run_metrics
from engine.scenario import parse_scenario
from engine.simulate import run_scenario
from engine.sweep import (
    SweepError,
    SweepPoint,
    parse_knob,
    plan_points,
    point_scenario,
)
from engine.sweep_pool import run_sweep

BASE = {
    "name": "sweep-base",
    "config": {"max_num_seqs": 8, "max_model_len": 512, "block_size": 16, "num_gpu_blocks": 60},
    "requests": [
        {"id": f"r{i}", "arrival_step": i, "prompt_len": 40 + 30 * i, "max_tokens": 20 + i}
        for i in range(8)
    ],
}


def test_knob_parsing_and_validation() -> None:
    assert parse_knob("max_num_batched_tokens=64,128").values == (64, 128)
    assert parse_knob("enable_chunked_prefill=on,off").values == (True, False)
    assert parse_knob("policy=fcfs,priority").values == ("fcfs", "priority")
    assert parse_knob("num_gpu_blocks=20:40:10").values == (20, 30, 40)
    with pytest.raises(SweepError, match="not an engine knob"):
        parse_knob("warp_speed=1,2")
    with pytest.raises(SweepError, match="finite"):
        parse_knob("max_num_seqs=nan")
    with pytest.raises(SweepError, match="max_num_batched_tokens"):
        point_scenario(BASE, SweepPoint(0, {"max_num_batched_tokens": 4}, 0))


def test_grid_points() -> None:
    knobs = [parse_knob("max_num_batched_tokens=64,128"), parse_knob("max_num_seqs=2,4,8")]
    points = plan_points(knobs, repeat=2)
    assert len(points) == 12
    assert points[0].knobs == {"max_num_batched_tokens": 64, "max_num_seqs": 2}
    assert [p.repeat for p in points[:2]] == [0, 1]


def test_sweep_is_deterministic_and_matches_simulate() -> None:
    knob = parse_knob("max_num_batched_tokens=32,64,128")
    first = run_sweep(BASE, [knob], repeat=2, workers=2)
    second = run_sweep(BASE, [knob], repeat=2, workers=1)
    assert [r.metrics for r in first] == [r.metrics for r in second]
    assert len(first) == 6 and all(r.error is None for r in first)
    for res in first:
        data = point_scenario(BASE, res.point)
        scenario = parse_scenario(data)
        direct = run_metrics(run_scenario(scenario), scenario.config.cache.num_usable_blocks)
        assert res.metrics == direct
    # A bigger budget finishes the same work in fewer steps.
    steps = [first[i].metrics["steps"] for i in (0, 2, 4)]
    assert steps[0] > steps[1] >= steps[2]


def test_generated_workload_repeats_differ_by_seed() -> None:
    base = {
        "config": {"max_num_seqs": 16, "max_model_len": 1024},
        "workload": {"kind": "poisson", "rate": 50, "num_requests": 30, "seed": 3},
    }
    a = run_sweep(base, [parse_knob("max_num_batched_tokens=256")], repeat=2, workers=1)
    b = run_sweep(base, [parse_knob("max_num_batched_tokens=256")], repeat=2, workers=1)
    assert [r.metrics for r in a] == [r.metrics for r in b]
    assert a[0].metrics != a[1].metrics
