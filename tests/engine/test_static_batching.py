"""Static batching, the baseline of the article's section 1: padding and idle rows."""

from __future__ import annotations

from engine.scenario import parse_scenario
from engine.simulate import run_scenario


def _article_s1(batching: str) -> dict:  # type: ignore[type-arg]
    return {
        "name": f"article_s1_{batching}",
        "config": {
            "max_num_batched_tokens": 64,
            "max_num_seqs": 4,
            "max_model_len": 64,
            "block_size": 4,
            "num_gpu_blocks": 100,
            "enable_prefix_caching": False,
            "batching": batching,
        },
        "requests": [
            {"id": "A", "prompt_len": 4, "max_tokens": 2},
            {"id": "B", "prompt_len": 4, "max_tokens": 8},
            {"id": "C", "prompt_len": 20, "max_tokens": 2},
            {"id": "D", "arrival_step": 1, "prompt_len": 4, "max_tokens": 2},
        ],
    }


def test_static_batch_pads_prompts_and_keeps_finished_rows() -> None:
    result = run_scenario(parse_scenario(_article_s1("static")))
    steps = result["steps"]
    # Prompts [4, 4, 20] as a rectangle: 3 x 20 - 28 = 32 padding positions.
    assert steps[0]["scheduled"] == {"A": 4, "B": 4, "C": 20}
    assert steps[0]["num_padding_tokens"] == 32
    # A and C finish at step 1; their rows idle while B decodes (steps 2..7), and D
    # waits for the whole batch even though slots are free.
    assert steps[1]["finished_req_ids"] == ["A", "C"]
    for s in steps[2:8]:
        assert s["scheduled"] == {"B": 1}
        assert s["num_padding_tokens"] == 2
        assert s["waiting_reasons"] == {"D": "static_batch"}
    assert steps[7]["finished_req_ids"] == ["B"]
    assert steps[8]["scheduled"] == {"D": 4}
    assert result["total_padding_tokens"] == 32 + 2 * 6


def test_continuous_batching_admits_at_once_without_padding() -> None:
    cont = run_scenario(parse_scenario(_article_s1("continuous")))
    static = run_scenario(parse_scenario(_article_s1("static")))
    assert cont["total_padding_tokens"] == 0
    assert cont["steps"][1]["scheduled"]["D"] == 4  # D joins the running batch at once
    assert cont["num_steps"] < static["num_steps"]
    # Same real work; only the schedule (and the waste) differ.
    assert cont["total_scheduled_tokens"] == static["total_scheduled_tokens"]
    for req_id, rec in cont["requests"].items():
        assert rec["output_token_ids"] == static["requests"][req_id]["output_token_ids"]
