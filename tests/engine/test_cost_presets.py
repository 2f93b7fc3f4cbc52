"""Cost-model presets for real model × GPU pairs: each is labelled with its source, a fitted
one gives back the published figure it was fitted on, and a lone request through the engine
on the SimRunner lands near the published figures the fit did not use (held out)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.runner.cost_model import (
    RooflineCostModel,
    describe_cost_model,
    load_cost_model,
    preset_catalog,
    preset_names,
)
from engine.runner.cost_presets import PRESETS, PublishedPoint
from engine.runner.sim import SimRunner
from engine.scenario import load_scenario
from engine.simulate import run_scenario

NIM = "h100x2-fp8:llama-3.1-70b"


def test_every_published_preset_names_its_pair_and_its_source() -> None:
    catalog = {p["key"]: p for p in preset_catalog()}
    assert list(catalog)[: len(PRESETS)] == [p.key for p in PRESETS]
    pairs = {(p.gpu.split("-")[0], p.model) for p in PRESETS}
    assert pairs >= {(g, m) for g in ("h100", "a100") for m in ("llama-3.1-8b", "llama-3.1-70b")}
    for p in PRESETS:
        info = catalog[p.key]
        assert info["published"] and info["label"] == p.label
        assert f"TP{p.tp}" in p.label or p.tp == 1
        # Every efficiency says where it came from: a URL or the preset it borrows from.
        assert info["source"].count("mbu") == 1 and info["source"].count("mfu") == 1
        assert "https://" in info["source"] or "taken from the fit of preset" in info["source"]
        assert describe_cost_model(p.key) == info
    plain = catalog["h100:llama-3-8b"]
    assert not plain["published"] and "assumed" in plain["source"]
    assert set(preset_names()) == set(catalog)


@pytest.mark.parametrize("preset", [p for p in PRESETS if not isinstance(p.mbu_fit, str)])
def test_a_fitted_preset_gives_back_the_figures_it_was_fitted_on(preset) -> None:  # type: ignore[no-untyped-def]
    model = load_cost_model(preset.key)
    assert isinstance(model, RooflineCostModel)
    itl = preset.mbu_fit
    assert isinstance(itl, PublishedPoint) and itl.what == "itl"
    context = itl.prompt_tokens + itl.output_tokens // 2
    assert model.chunks_ms([(context, 1)]) == pytest.approx(itl.ms, rel=1e-9)
    if isinstance(preset.mfu_fit, PublishedPoint):
        ttft = preset.mfu_fit
        assert model.chunks_ms([(0, ttft.prompt_tokens)]) == pytest.approx(ttft.ms, rel=1e-9)
    assert 0 < model.mfu <= 1 and 0 < model.mbu <= 1


def _lone_request(tmp_path: Path, prompt: int, output: int) -> tuple[float, float]:
    """TTFT and mean ITL (ms) of one request alone on the engine with the NIM preset."""
    path = tmp_path / "lone.json"
    scenario = {
        "name": "lone",
        "config": {
            "max_num_batched_tokens": 8192,
            "max_num_seqs": 8,
            "block_size": 16,
            "num_gpu_blocks": 2000,
            "max_model_len": 8192,
            "enable_chunked_prefill": True,
        },
        "requests": [{"id": "r", "arrival_step": 0, "prompt_len": prompt, "max_tokens": output}],
    }
    path.write_text(json.dumps(scenario))
    result = run_scenario(load_scenario(str(path)), SimRunner(load_cost_model(NIM)))  # type: ignore[arg-type]
    req = result["requests"]["r"]
    assert req["finish_reason"] == "length" and req["num_output_tokens"] == output
    steps = result["steps"]
    first = req["first_token_step"]
    ttft = sum(s["forward_ms"] for s in steps[: first + 1])
    decodes = [s["forward_ms"] for s in steps[first + 1 : req["finish_step"] + 1]]
    return ttft, sum(decodes) / len(decodes)


def test_held_out_nim_figures_on_the_engine(tmp_path: Path) -> None:
    """The fit used ITL at 500 in and TTFT at 5000 in; NIM also published, for the same
    pair at concurrency 1, ITL 18.58 ms at 5000 in / 500 out and TTFT 47.77 ms at 500 in /
    2000 out. The sim lands within 5% of the first; the second within 25% (the roofline
    has no per-request overheads, which weigh most on a short prefill), below it."""
    ttft, itl = _lone_request(tmp_path, 5000, 500)
    assert ttft == pytest.approx(406.77, rel=0.01)  # the fitted point, through the engine
    assert itl == pytest.approx(18.58, rel=0.05)
    short_ttft, short_itl = _lone_request(tmp_path, 500, 200)
    assert 0.75 * 47.77 <= short_ttft < 47.77
    assert short_itl == pytest.approx(18.91, rel=0.05)


def test_unknown_presets_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown GPU"):
        load_cost_model("h999x2-fp8:llama-3.1-70b")
    with pytest.raises(ValueError):
        describe_cost_model("h100:llama-9")
