"""Trace requests without token lists (engine.trace_prompt): the same tokens as the
importer's, prefix caching from block hashes exactly as from tokens, and a run cut short
says so."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import pytest

from engine.mooncake import BlockTokens, parse_trace, trace_scenario
from engine.request import Request, SamplingParams
from engine.scenario import ScenarioError, parse_scenario
from engine.simulate import run_scenario
from engine.trace_prompt import TracePrompt
from tools.gen_trace import generate_trace
from tools.gen_trace import main as gen_main

B = 512


def _rows(n: int, max_input: int, seed: int, median_input: int = 2000) -> list:
    lines = (
        json.dumps(r)
        for r in generate_trace(
            n,
            duration_s=n / 5,
            max_input=max_input,
            median_input=median_input,
            median_output=12,
            max_output=40,
            seed=seed,
        )
    )
    return parse_trace(lines, B)


def test_a_trace_prompt_is_the_importers_tokens() -> None:
    rows = _rows(60, 9000, seed=5)
    blocks = BlockTokens(B)
    for i, row in enumerate(rows):
        prompt = TracePrompt(row.hash_ids, row.input_length, B, i)
        tokens = blocks.prompt(i, row)
        assert list(prompt) == tokens
        assert len(prompt) == row.input_length
        assert prompt[-1] == tokens[-1] and prompt[3] == tokens[3]
        assert prompt[700:1500] == tokens[700:1500]


def test_engine_blocks_share_exactly_where_chains_and_positions_coincide() -> None:
    a = TracePrompt([0, 1, 2], 2 * B + 100, B, 0)
    b = TracePrompt([0, 1, 7], 3 * B, B, 1)  # same first two trace blocks
    c = TracePrompt([0, 1, 2], 2 * B + 60, B, 2)  # a shorter partial last block
    d = TracePrompt([1], B, B, 3)  # block 1's tokens, but at position 0
    e = TracePrompt([0], 3 * B, B, 4)  # its own tokens after block 0
    for bs in (16, 48, 100, 512, 1000):
        ha, hb, hc, hd, he = (p.block_hashes(bs) for p in (a, b, c, d, e))
        assert len(ha) == len(a) // bs
        shared_ab = sum(1 for x, y in zip(ha, hb, strict=False) if x == y)
        assert shared_ab == (2 * B) // bs  # up to the end of the common chain
        # A partial trailing trace block: shared up to the shorter one's full blocks.
        assert hc == ha[: len(hc)]
        assert not set(hd) & set(ha)  # the same content after another parent: no share
        assert sum(1 for x, y in zip(ha, he, strict=False) if x == y) == B // bs
        assert len(set(he)) == len(he)


def _lazy(scenario: dict, rows: list) -> dict:
    out = dict(scenario)
    out["requests"] = [
        {
            "id": r["id"],
            "arrival_time_ms": r["arrival_time_ms"],
            "max_tokens": r["max_tokens"],
            "trace_prompt": TracePrompt(row.hash_ids, row.input_length, B, i).as_dict(),
        }
        for i, (r, row) in enumerate(zip(scenario["requests"], rows, strict=True))
    ]
    return out


@pytest.mark.parametrize("block_size", [16, 48, 512, 1000])
def test_hashes_and_token_lists_make_the_same_decisions_step_by_step(block_size: int) -> None:
    rows = _rows(120, 12000, seed=block_size)
    config = {
        "block_size": block_size,
        "max_model_len": 16384,
        # A tight pool: prefix hits, evictions and preemptions all happen.
        "num_gpu_blocks": max(40, 3 * 16384 // block_size),
        "max_num_batched_tokens": 2048,
    }
    tokens = run_scenario(parse_scenario(trace_scenario(rows, B, config=config, tokens=True)))
    hashed = run_scenario(parse_scenario(trace_scenario(rows, B, config=config)))
    assert tokens["complete"] and hashed["complete"]
    assert sum(sum(s["prefix_cache_hit_tokens"].values()) for s in tokens["steps"]) > 0
    assert hashed["steps"] == tokens["steps"]
    assert hashed["requests"] == tokens["requests"]


def test_old_token_list_scenarios_still_load() -> None:
    rows = _rows(5, 3000, seed=1)
    data = trace_scenario(rows, B, tokens=True)
    scenario = parse_scenario(data)
    assert scenario.requests[0].prompt_token_ids == tuple(data["requests"][0]["prompt_token_ids"])


def test_a_compact_scenario_is_about_the_traces_size(tmp_path: Path) -> None:
    rows = _rows(200, 100_000, seed=2, median_input=20_000)
    trace_chars = sum(len(json.dumps(r)) for r in generate_trace(200, 40.0, 100_000, 20_000,
                                                                 12, 40, seed=2))  # fmt: skip
    compact = json.dumps(trace_scenario(rows, B))
    assert len(compact) < 3 * trace_chars
    assert sum(r.input_length for r in rows) > 20 * len(compact) // 10  # no token lists


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ({"hash_ids": [0, 1], "input_length": 10, "block_tokens": 8}, "index: required"),
        ({"hash_ids": [0, 1, 2], "input_length": 10, "block_tokens": 8, "index": 0}, "3 ids"),
        ({"hash_ids": [-1], "input_length": 10, "block_tokens": 8, "index": 0}, "hash_ids[0]"),
        ({"hash_ids": [], "input_length": 0, "block_tokens": 8, "index": 0}, "input_length"),
        ({"hash_ids": [], "input_length": 5, "block_tokens": 8, "index": 0, "x": 1}, "x: unknown"),
    ],
)
def test_a_bad_trace_prompt_is_named(prompt: dict, message: str) -> None:
    data = {"requests": [{"id": "a", "max_tokens": 2, "trace_prompt": prompt}]}
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data)
    assert "requests[0].trace_prompt" in str(err.value) and message in str(err.value)


def test_a_request_from_a_trace_prompt_keeps_its_prompt_lazy() -> None:
    prompt = TracePrompt(list(range(250)), 128_000, B, 0)
    req = Request("r", prompt, SamplingParams(max_tokens=3), 0.0, block_size=16)
    assert req.num_tokens == 128_000 and len(req.block_hashes) == 8000
    assert req.trace_prompt is prompt
    span = req.input_token_ids(127_990, 128_000)
    assert len(span) == 10 and span[-1] == prompt[-1]
    req.append_output_token_id(9)
    assert req.output_token_ids == [9] and req.num_tokens == 128_001


@pytest.mark.slow
def test_ten_thousand_requests_with_100k_prompts_run_to_their_ends(tmp_path: Path) -> None:
    """10,000+ generated requests, prompts up to 100k tokens with shared prefixes: every
    request finishes or is rejected with its reason, and the hits are real (time and memory
    are the bench's, not asserted here)."""
    path = tmp_path / "trace.jsonl"
    argv = "--requests 10000 --duration-s 20000 --max-input 100000 --median-input 400"
    argv += " --median-output 2 --max-output 4 --seed 7 -o"
    assert gen_main([*argv.split(), str(path)]) == 0
    rows = parse_trace(path.read_text().splitlines(), B)
    assert len(rows) == 10_000 and max(r.input_length for r in rows) > 75_000
    data = trace_scenario(rows, B, config={"max_model_len": 100_004, "num_gpu_blocks": 7000,
                                           "max_num_batched_tokens": 16384})  # fmt: skip
    result = run_scenario(parse_scenario(data))
    assert result["complete"], result.get("stopped")
    reasons = {r["finish_reason"] for r in result["requests"].values()}
    assert reasons <= {"length", "rejected"}
    assert result["completed"] == sum(
        1 for r in result["requests"].values() if r["finish_reason"] == "length"
    )
    assert all("reject_reason" in r for r in result["requests"].values()
               if r["finish_reason"] == "rejected")  # fmt: skip
    hits = sum(r["prefix_cache_hit_tokens_first_admission"] or 0
               for r in result["requests"].values())  # fmt: skip
    assert hits > 0


def test_a_run_cut_short_is_never_complete() -> None:
    rows = _rows(30, 4000, seed=3)
    data = trace_scenario(rows, B)
    data["config"]["max_steps"] = 20
    result = run_scenario(parse_scenario(data))
    assert result["complete"] is False
    stopped = result["stopped"]
    assert stopped["reason"] == "max_steps" and stopped["at_step"] == 20
    assert stopped["unfinished"] == len(rows) - sum(
        1 for r in result["requests"].values() if r["finish_reason"] is not None
    )
    assert stopped["unfinished"] > 0
    whole = run_scenario(parse_scenario(trace_scenario(rows, B)))
    assert whole["complete"] is True and "stopped" not in whole
    limited = run_scenario(parse_scenario(trace_scenario(rows, B)), time_limit_s=0.0)
    assert limited["complete"] is False and limited["stopped"]["reason"] == "time_limit"


def test_the_generator_is_deterministic_and_mooncake_shaped() -> None:
    a = list(islice(generate_trace(300, 60, seed=4), 300))
    assert a == list(generate_trace(300, 60, seed=4))
    rows = parse_trace((json.dumps(r) for r in a), B)
    seen: set[int] = set()
    for row in rows:
        assert len(row.hash_ids) == -(-row.input_length // B)
        new = [h for h in row.hash_ids if h not in seen]
        assert new == list(range(len(seen), len(seen) + len(new)))  # first appearance
        seen.update(new)
    assert len(seen) < sum(len(r.hash_ids) for r in rows)  # shared prefixes


def test_the_torch_runner_gets_the_same_tokens_from_a_trace_prompt() -> None:
    """Where a model runs, a trace prompt's tokens are made when read: the same outputs
    (greedy, the built-in model) as from the token lists."""
    from engine.runner.torch_runner import TorchRunner

    rows = _rows(4, 1200, seed=9, median_input=200)
    config = {"max_model_len": 2048, "num_gpu_blocks": 300, "block_size": 16}
    outputs = []
    for tokens in (True, False):
        data = trace_scenario(rows, B, config=config, tokens=tokens)
        # All at once: on the torch runner's clock (measured forward time) a timed
        # arrival's step would depend on the machine's load, not on the prompts.
        for req in data["requests"]:
            req["arrival_time_ms"] = 0.0
        scenario = parse_scenario(data)
        result = run_scenario(scenario, TorchRunner(scenario.config, device="cpu", num_threads=1))
        assert result["complete"]
        outputs.append(
            (
                [s["scheduled"] for s in result["steps"]],
                {k: r["output_token_ids"] for k, r in result["requests"].items()},
            )
        )
    assert outputs[0] == outputs[1]
    assert all(outputs[1][1].values())
