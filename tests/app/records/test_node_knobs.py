"""A vLLM node's announced knobs as a re-run reads them (app.records.node_rerun): ours
kept, vLLM's others dropped, and those not at vLLM's default named; prompts rebuilt from
block keys share blocks exactly where the keys do."""

from __future__ import annotations

from app.records.node_rerun import NodePrompts, node_knobs
from engine.config import EngineConfig
from protocol.blocks import prompt_block_hashes

NODE_CONFIG = {
    "max_num_batched_tokens": 2048,
    "max_num_seqs": 64,
    "max_model_len": 1024,
    "long_prefill_token_threshold": 0,
    "enable_chunked_prefill": True,
    "policy": "fcfs",
    "async_scheduling": False,
    "num_speculative_tokens": 0,
    "block_size": 16,
    "num_gpu_blocks": 257,
    "enable_prefix_caching": True,
    "max_num_scheduled_tokens": 2048,
    "max_num_partial_prefills": 1,
    "max_long_partial_prefills": 1,
    "stream_interval": 1,
    "max_num_queued_reqs": None,
}


def test_knobs_at_vllm_defaults_map_without_a_flag() -> None:
    known, flagged = node_knobs(NODE_CONFIG)
    assert flagged == []
    assert "max_num_scheduled_tokens" not in known
    config = EngineConfig().with_updates(**known)  # (main: "unknown knob")
    assert config.scheduler.max_num_seqs == 64 and config.cache.num_gpu_blocks == 257


def test_knobs_our_engine_lacks_are_named_when_not_default() -> None:
    changed = {**NODE_CONFIG, "max_num_scheduled_tokens": 1024, "max_num_partial_prefills": 4}
    known, flagged = node_knobs(changed)
    assert flagged == ["max_num_scheduled_tokens=1024", "max_num_partial_prefills=4"]
    EngineConfig().with_updates(**known)


def _detail(prompt: list[int]) -> dict[str, object]:
    return {
        "prompt_block_hashes": prompt_block_hashes(prompt),
        "num_prompt_tokens": len(prompt),
        "prompt_block_tokens": 512,
    }


def test_prompts_share_blocks_where_the_keys_share() -> None:
    shared = list(range(100, 100 + 1024))
    a, b, c = shared + [7] * 300, shared + [9] * 100, [5] * 700
    prompts = NodePrompts()
    built = [prompts.prompt(_detail(p)) or [] for p in (a, b, c)]
    pa, pb, pc = built
    assert [len(p) for p in built] == [len(a), len(b), len(c)]
    assert pa[:1024] == pb[:1024] and pa[1024:1124] != pb[1024:1124]
    assert pc[:512] != pa[:512]
    # Equal keys, equal blocks: the rebuilt prompts' keys share exactly where the real ones do.
    assert prompt_block_hashes(pa)[:2] == prompt_block_hashes(pb)[:2]
    assert prompt_block_hashes(pa)[2] != prompt_block_hashes(pb)[2]
    assert prompts.prompt({"num_prompt_tokens": 10}) is None
