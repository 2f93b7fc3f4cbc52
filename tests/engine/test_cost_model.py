"""The roofline cost model: presets, the knee, the calibration fit, and the article's
section 6 chunk-size trade-off on the SimRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.runner.calibrate import StepSample, compositions, fit_roofline
from engine.runner.cost_model import (
    GPUS,
    MODELS,
    RooflineCostModel,
    load_cost_model,
    roofline_preset,
)
from engine.runner.sim import CostModel, SimRunner
from engine.scenario import parse_scenario
from engine.simulate import run_scenario


def test_small_batches_are_memory_bound_and_large_ones_compute_bound() -> None:
    model = roofline_preset("h100", "llama-3-8b")
    knee = model.knee_tokens()
    assert 150 < knee < 600  # ~300 tokens for bf16 on an H100
    decode = [(128, 1)]
    one = model.chunks_ms(decode)
    # Below the knee, 16 short decodes cost about what one does (the weights are read
    # once; their KV is small)...
    assert model.chunks_ms(decode * 16) < 1.05 * one
    # ...above it, time grows with tokens.
    big = model.chunks_ms([(0, 4096)])
    assert big > 4 * model.chunks_ms([(0, 512)]) * 0.9 and big > 5 * one


def test_presets_cover_the_public_gpus_and_reject_unknown_names() -> None:
    assert {"a100", "h100", "h200"} <= set(GPUS) and "llama-3-8b" in MODELS
    h200 = roofline_preset("h200", "llama-3-8b")
    h100 = roofline_preset("h100", "llama-3-8b")
    # Same compute, more bandwidth: memory-bound steps are faster on the H200.
    assert h200.chunks_ms([(512, 1)] * 8) < h100.chunks_ms([(512, 1)] * 8)
    with pytest.raises(ValueError, match="unknown GPU"):
        load_cost_model("b999:llama-3-8b")


def test_cost_model_files_round_trip(tmp_path: Path) -> None:
    roof = roofline_preset("a100", "tiny")
    path = tmp_path / "roof.json"
    path.write_text(json.dumps(roof.as_dict()))
    assert load_cost_model(str(path)) == roof
    lin = tmp_path / "lin.json"
    lin.write_text(json.dumps({"base_ms": 1.0, "per_token_ms": 0.1}))
    assert load_cost_model(str(lin)) == CostModel(base_ms=1.0, per_token_ms=0.1)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kind": "roofline", "warp": 9}))
    with pytest.raises(ValueError, match="unknown field 'warp'"):
        load_cost_model(str(bad))


def test_fit_recovers_a_known_roofline() -> None:
    truth = RooflineCostModel(
        2e8, 8, 1024, 256, 2, peak_flops=4e12, bandwidth=5e10, launch_ms=0.3, mfu=1, mbu=1
    )
    samples = []
    for prefill, decodes in compositions():
        chunks = tuple((c - 1, 1) for c in decodes) + (((0, prefill),) if prefill else ())
        ms = truth.chunks_ms(chunks)
        samples.append(StepSample(0, 0, 0, ms, chunks))
    spec = MODELS["medium"].__class__("m", 2e8, 8, 1024, 256, 2)
    fit = fit_roofline(samples, spec)
    for s in samples:
        assert fit.chunks_ms(s.chunks) == pytest.approx(s.ms, rel=0.15)


def _section6(budget: int) -> dict:  # type: ignore[type-arg]
    decodes = [{"id": f"d{i}", "prompt_len": 200, "max_tokens": 150} for i in range(48)]
    long = {"id": "long", "arrival_step": 20, "prompt_len": 8000, "max_tokens": 4}
    return {
        "name": f"s6_{budget}",
        "config": {
            "max_num_batched_tokens": budget,
            "max_num_seqs": 64,
            "max_model_len": 16384,
            "block_size": 16,
            "num_gpu_blocks": 4000,
            "enable_prefix_caching": False,
        },
        "requests": [*decodes, long],
    }


def test_chunk_size_trade_off_has_the_articles_shape() -> None:
    """Small budgets protect the decodes' inter-token latency; large ones cut the long
    prompt's TTFT; past the knee, steps get slower."""
    cost = roofline_preset("h100", "llama-3-8b")
    ttft, itl = [], []
    for budget in (256, 1024, 4096):
        runner = SimRunner(cost)
        result = run_scenario(parse_scenario(_section6(budget)), runner)
        steps = {s["step"]: s for s in result["steps"]}
        rec = result["requests"]["long"]
        times = _step_end_ms(result, runner)
        ttft.append(times[rec["first_token_step"]] - times[rec["arrival_step"] - 1])
        # ITL of a decode while the long prompt is being prefilled.
        window = range(rec["first_scheduled_step"], rec["first_token_step"] + 1)
        gaps = [times[s] - times[s - 1] for s in window if "d0" in steps[s]["scheduled"]]
        itl.append(sum(gaps) / len(gaps))
    assert ttft[0] > ttft[1] > ttft[2]
    assert itl[0] < itl[1] < itl[2]


def _step_end_ms(result: dict, runner: SimRunner) -> dict[int, float]:  # type: ignore[type-arg]
    """Modelled wall time at the end of each step (the SimRunner's forward_ms, summed)."""
    del runner
    t, out = 0.0, {}
    for s in result["steps"]:
        t += s["forward_ms"]
        out[s["step"]] = t
    return out
