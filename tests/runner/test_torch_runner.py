"""TorchRunner behind the scheduler: chunked prefill, prefix hits and recompute give the same
logits/tokens as the plain path, and scheduling decisions equal the SimRunner's."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.request import SamplingParams
from engine.runner import make_runner
from engine.runner.sim import SimRunner
from engine.runner.tokenizer import ByteTokenizer
from engine.runner.torch_runner import TorchRunner
from engine.scenario import load_scenario, parse_scenario
from engine.simulate import run_scenario
from tests.runner.helpers import DEVICES, SMALL, blocks_for, chunk, plan, small_runner

ROOT = Path(__file__).resolve().parents[2]
ATOL = 1e-4


def _prompt(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, SMALL.vocab_size) for _ in range(n)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(3))
def test_chunked_prefill_equals_one_shot(device: str, seed: int) -> None:
    rng = random.Random(seed)
    runner = small_runner(device, num_gpu_blocks=64, block_size=4)
    prompt = _prompt(seed, rng.randint(20, 45))
    one_shot = runner.compute_logits(
        plan(chunk("one", prompt, 0, range(1, 1 + blocks_for(len(prompt), 4)), is_new=True))
    )["one"]
    # The same prompt in random chunks, each step packed with another request's decode.
    free = list(range(20, 64))
    rng.shuffle(free)
    table: list[int] = []
    other = _prompt(seed + 100, 5)
    runner.execute(
        plan(chunk("other", other, 0, [free.pop(), free.pop(), free.pop()], is_new=True))
    )
    pieces, start = [], 0
    while start < len(prompt):
        n = rng.randint(1, len(prompt) - start)
        new_blocks = [free.pop() for _ in range(blocks_for(start + n, 4) - len(table))]
        table += new_blocks
        step = plan(
            chunk("other", [7], len(other), [], is_new=False),
            chunk(
                "chk",
                prompt[start : start + n],
                start,
                new_blocks,
                is_new=start == 0,
                sample=start + n == len(prompt),
            ),
        )
        other.append(7)
        pieces.append(runner.compute_logits(step)["chk"])
        start += n
    torch.testing.assert_close(torch.cat(pieces), one_shot, atol=ATOL, rtol=ATOL)


@pytest.mark.parametrize("device", DEVICES)
def test_prefix_cache_hit_equals_miss(device: str) -> None:
    runner = small_runner(device, num_gpu_blocks=64, block_size=4)
    a = _prompt(1, 11)
    b = a[:8] + _prompt(2, 5)  # shares A's two full blocks
    runner.execute(plan(chunk("A", a, 0, [7, 3, 9], is_new=True)))
    # B is admitted with a hit of 8 tokens: its table starts with A's blocks.
    hit = runner.compute_logits(plan(chunk("B", b[8:], 8, [7, 3, 12, 15], is_new=True, hit=8)))
    miss = runner.compute_logits(plan(chunk("B2", b, 0, [20, 21, 22, 23], is_new=True)))
    torch.testing.assert_close(hit["B"], miss["B2"][8:], atol=ATOL, rtol=ATOL)


def _scenario(
    num_gpu_blocks: int, sampling: dict[str, Any] | None = None, vocab: int = SMALL.vocab_size
) -> Any:
    reqs = [
        {
            "id": f"r{i}",
            "arrival_step": i // 2,
            "prompt_token_ids": _prompt(10 + i, n),
            "max_tokens": m,
            **(sampling or {}),
        }
        for i, (n, m) in enumerate([(13, 12), (9, 14), (15, 10), (6, 16)])
    ]
    return parse_scenario(
        {
            "config": {
                "max_num_batched_tokens": 24,
                "max_num_seqs": 4,
                "block_size": 4,
                "num_gpu_blocks": num_gpu_blocks,
                "max_model_len": 64,
                "enable_prefix_caching": False,
            },
            "requests": reqs,
        }
    )


def _tokens(result: dict[str, Any]) -> dict[str, list[int]]:
    return {k: v["output_token_ids"] for k, v in result["requests"].items()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "sampling", [None, {"temperature": 0.8, "top_p": 0.9, "seed": 3}], ids=["greedy", "seeded"]
)
def test_preempt_and_recompute_gives_the_same_tokens(device: str, sampling: Any) -> None:
    def run(blocks: int) -> dict[str, Any]:
        sc = _scenario(blocks, sampling)
        runner = TorchRunner(sc.config, device=device, preset=SMALL, dtype="float32")
        return run_scenario(sc, runner)

    roomy, tight = run(200), run(10)
    assert roomy["total_preemptions"] == 0
    assert tight["total_preemptions"] >= 2
    assert tight["completed"] == roomy["completed"] == 4
    assert _tokens(tight) == _tokens(roomy)


@pytest.mark.parametrize("device", DEVICES)
def test_sampling_is_seeded_per_request(device: str) -> None:
    def run(sampling: dict[str, Any] | None) -> dict[str, list[int]]:
        sc = _scenario(200, sampling)
        runner = TorchRunner(sc.config, device=device, preset=SMALL, dtype="float32")
        return _tokens(run_scenario(sc, runner))

    seeded = {"temperature": 1.5, "top_p": 0.95, "seed": 7}
    assert run(seeded) == run(seeded)
    assert run(seeded) != run({**seeded, "seed": 8})
    # A vanishing top_p keeps only the most likely token: greedy.
    assert run({"temperature": 1.0, "top_p": 1e-9, "seed": 1}) == run(None)


def _decisions(result: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (
            s["scheduled"],
            s["preempted_req_ids"],
            s["finished_req_ids"],
            s["prefix_cache_hit_tokens"],
        )
        for s in result["steps"]
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("path", ["scenarios/seed.json", "tests/runner/kv_pressure.json"])
def test_scheduling_decisions_equal_the_sim_runner(device: str, path: str) -> None:
    scenario = load_scenario(ROOT / path)
    runner = make_runner("torch", scenario.config, device=device)  # the `tiny` preset
    torch_result = run_scenario(scenario, runner)
    sim_result = run_scenario(scenario, SimRunner())
    assert _decisions(torch_result) == _decisions(sim_result)
    assert torch_result["completed"] == len(scenario.requests)
    if "kv_pressure" in path:
        assert torch_result["total_preemptions"] >= 2
        assert any(v for s in torch_result["steps"] for v in s["prefix_cache_hit_tokens"].values())


def test_runner_state_follows_the_plan() -> None:
    runner = small_runner("cpu")
    runner.execute(plan(chunk("x", [5, 6, 7, 8, 9], 0, [4, 2], is_new=True)))
    runner.execute(plan(chunk("x", [10], 5, [], is_new=False)))
    assert runner.block_tables == {"x": [4, 2]}
    runner.execute(plan(preempted=("x",)))
    assert runner.block_tables == {} and "x" in runner.sampling
    runner.execute(plan(finished=("x",)))
    assert runner.sampling == {}
    out = runner.execute(plan(chunk("y", [5, 6], 0, [3], is_new=True, sample=False)))
    assert out.sampled_token_ids == {} and out.forward_ms > 0 and not out.simulated


def test_out_of_vocabulary_token_ids_are_refused() -> None:
    runner = small_runner("cpu")
    with pytest.raises(ValueError, match=r"token id 512 at position 1 is outside"):
        runner.check_token_ids([3, 512])
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        runner.execute(plan(chunk("x", [5, 600], 0, [1], is_new=True)))
    assert runner.block_tables == {}  # refused before any state changed


def test_describe_and_tokenizer() -> None:
    runner = small_runner("cpu")
    info = runner.describe()
    assert (runner.name, runner.simulated) == ("torch", False)
    assert info["device"] == "cpu" and info["dtype"] == "float32"
    assert isinstance(info["params"], int) and info["params"] > 0
    tok = runner.tokenizer
    assert isinstance(tok, ByteTokenizer)
    ids = tok.encode("héllo ✓")
    assert ids[0] == ByteTokenizer.BOS and max(ids) < 259
    assert tok.decode(ids) == "héllo ✓"
    assert tok.decode([*tok.encode("a", add_bos=False), 1000, ByteTokenizer.EOS]) == "a<1000>"
    # Bytes that are not UTF-8 (a synthetic prompt's random ids) read as escapes, not U+FFFD.
    bad = [b + ByteTokenizer.OFFSET for b in (0x80, 0xFF, 0x41, 0xE2, 0x82)]
    assert tok.decode(bad) == "\\x80\\xffA\\xe2\\x82"
    runner.check_token_ids(ids)


def test_plan_objects_are_not_mutated() -> None:
    runner = small_runner("cpu")
    step = plan(chunk("x", [5, 6, 7], 0, [4], is_new=True), params={"x": SamplingParams()})
    before = copy.deepcopy(step)
    runner.execute(step)
    assert step == before
