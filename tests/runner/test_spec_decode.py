"""Speculative decoding on the torch runner: drafts verified in the same forward, greedy
output token-identical with and without drafts (preemption included), seeded sampling
reproducible; and async scheduling gives the sync run's tokens."""

from __future__ import annotations

import random
from typing import Any

import pytest

from engine.config import EngineConfig
from engine.runner.torch_runner import TorchRunner
from engine.scenario import parse_scenario
from engine.simulate import run_scenario
from tests.runner.helpers import DEVICES, SMALL, chunk, engine_config, plan, small_runner

PROMPT = [random.Random(4).randrange(3, SMALL.vocab_size) for _ in range(10)]


def _decode_greedy(runner: TorchRunner, n: int) -> list[int]:
    """Prefill PROMPT (blocks 1-3 of 4 tokens) and decode one token per step: n tokens."""
    tokens = runner.execute(plan(chunk("a", PROMPT, 0, [1, 2, 3], is_new=True))).sampled_token_ids
    out = tokens["a"]
    while len(out) < n:
        pos = len(PROMPT) + len(out) - 1
        step = plan(chunk("a", out[-1:], pos, [4] if pos == 12 else [], is_new=False))
        out += runner.execute(step).sampled_token_ids["a"]
    return out


def _prefill(runner: TorchRunner) -> int:
    step = plan(chunk("a", PROMPT, 0, [1, 2, 3], is_new=True))
    return runner.execute(step).sampled_token_ids["a"][0]


@pytest.mark.parametrize("device", DEVICES)
def test_drafts_are_verified_at_every_position_of_one_forward(device: str) -> None:
    t = _decode_greedy(small_runner(device), 5)
    # All three drafts right: they are accepted, plus the target's token after them.
    runner = small_runner(device)
    assert _prefill(runner) == t[0]
    step = plan(chunk("a", [t[0]], 10, [4], is_new=False, spec=t[1:4]))
    assert runner.execute(step).sampled_token_ids["a"] == t[1:5]
    # The second draft wrong: one accepted, then the target's token. The scheduler rolls
    # back to position 12; the next step overwrites the rejected drafts' KV entries.
    runner = small_runner(device)
    _prefill(runner)
    wrong = (t[2] + 1) % SMALL.vocab_size
    step = plan(chunk("a", [t[0]], 10, [4], is_new=False, spec=[t[1], wrong, t[3]]))
    assert runner.execute(step).sampled_token_ids["a"] == t[1:3]
    step = plan(chunk("a", [t[2]], 12, [], is_new=False, spec=[t[3]]))
    assert runner.execute(step).sampled_token_ids["a"] == t[3:5]


def test_drafts_must_fill_the_scheduled_tokens() -> None:
    runner = small_runner("cpu")
    _prefill(runner)
    bad = chunk("a", [5], 10, [4], is_new=False, spec=[6, 7])._replace(num_tokens=2)
    with pytest.raises(ValueError, match="drafts included"):
        runner.execute(plan(bad))


def test_propose_uses_the_configured_ngram_bounds() -> None:
    requests = [("a", [5, 6, 7, 8, 1, 5, 6, 7]), ("b", [1, 2, 3]), ("c", [9, 1, 2, 9, 1])]
    config = engine_config(prompt_lookup_min=3, prompt_lookup_max=4)
    runner = TorchRunner(config, device="cpu", preset=SMALL, dtype="float32")
    assert runner.propose(requests, 2) == [[8, 1], [], []]
    assert small_runner("cpu").propose(requests, 2) == [[8, 1], [], [2, 9]]


# ------------------------------------------------------------------ through the engine
def _scenario(
    num_speculative_tokens: int = 0,
    sampling: dict[str, Any] | None = None,
    num_gpu_blocks: int = 64,
    async_scheduling: bool = False,
) -> Any:
    """Four requests whose prompts repeat a 6-token phrase four times; the tiny model's
    greedy continuations soon repeat too, so prompt lookup finds drafts (not all right)."""
    rng = random.Random(0)
    requests = []
    for i in range(4):
        phrase = [rng.randrange(3, 32000) for _ in range(6)]
        requests.append(
            {
                "id": f"r{i}",
                "arrival_step": i,
                "prompt_token_ids": phrase * 4,
                "max_tokens": 32,
                **(sampling or {}),
            }
        )
    config = {
        "max_num_batched_tokens": 64,
        "max_num_seqs": 4,
        "block_size": 4,
        "num_gpu_blocks": num_gpu_blocks,
        "max_model_len": 128,
        "num_speculative_tokens": num_speculative_tokens,
        "async_scheduling": async_scheduling,
    }
    return parse_scenario({"config": config, "requests": requests})


def _run(scenario: Any) -> dict[str, Any]:
    config: EngineConfig = scenario.config
    return run_scenario(scenario, TorchRunner(config, device="cpu", preset="tiny", seed=0))


def _tokens(result: dict[str, Any]) -> dict[str, list[int]]:
    return {k: v["output_token_ids"] for k, v in result["requests"].items()}


@pytest.mark.parametrize("num_gpu_blocks", [64, 16], ids=["roomy", "preempting"])
def test_greedy_spec_decode_is_token_identical(num_gpu_blocks: int) -> None:
    plain = _run(_scenario(0, num_gpu_blocks=num_gpu_blocks))
    spec = _run(_scenario(4, num_gpu_blocks=num_gpu_blocks))
    assert spec["completed"] == plain["completed"] == 4
    assert _tokens(spec) == _tokens(plain)
    assert all(len(t) == 32 for t in _tokens(spec).values())
    # Drafts were accepted AND rejected (rollback exercised), and steps were saved.
    assert 0 < spec["total_accepted_tokens"] < spec["total_draft_tokens"]
    assert spec["num_steps"] < plain["num_steps"]
    if num_gpu_blocks == 16:
        assert spec["total_preemptions"] > 0


def test_seeded_spec_decode_is_reproducible() -> None:
    # A low temperature: the random model's sampled text repeats, so drafts are proposed,
    # and some are accepted and some rejected by the random verification.
    sampling = {"temperature": 0.02, "seed": 5}
    first = _run(_scenario(4, sampling))
    second = _run(_scenario(4, sampling))
    assert _tokens(first) == _tokens(second)
    assert 0 < first["total_accepted_tokens"] < first["total_draft_tokens"]
    other = _run(_scenario(4, {**sampling, "seed": 6}))
    assert _tokens(other) != _tokens(first)


@pytest.mark.parametrize(
    "sampling", [None, {"temperature": 0.8, "top_p": 0.9, "seed": 3}], ids=["greedy", "seeded"]
)
def test_async_scheduling_gives_the_sync_tokens(sampling: dict[str, Any] | None) -> None:
    sync = _run(_scenario(sampling=sampling))
    async_ = _run(_scenario(sampling=sampling, async_scheduling=True))
    assert async_["completed"] == sync["completed"] == 4
    assert _tokens(async_) == _tokens(sync)
    assert any(s["updated_step"] not in (None, s["step"]) for s in async_["steps"])
