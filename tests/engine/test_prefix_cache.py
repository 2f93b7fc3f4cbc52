"""Automatic prefix caching: full-block hits, the num_tokens - 1 cap, LRU eviction."""

from __future__ import annotations

import random

import pytest

from engine.block_pool import BlockPool, FreeKVCacheBlockQueue, KVCacheBlock
from tests.engine.helpers import check_invariants, make_request, make_scheduler, scheduled, step

PROMPT = [7, 8, 9, 10, 11, 12, 13, 14, 15, 16]  # two full blocks of 4, then 2 tokens


def test_a_request_admitted_later_in_the_same_step_hits_blocks_registered_at_allocation() -> None:
    s = make_scheduler(block_size=4, enable_prefix_caching=True)
    make_request(s, "A", PROMPT)
    make_request(s, "B", [*PROMPT[:8], 99, 98, 97])
    out = step(s)
    assert scheduled(out) == {"A": 10, "B": 3}
    b = out.chunks[1]
    assert (b.num_computed_before, b.num_prefix_hit_tokens) == (8, 8)
    # A holds 3 blocks, B shares A's first two and adds one.
    assert out.kv_blocks_used == 4
    shared = s.kv_cache_manager.req_to_blocks["B"][:2]
    assert [blk.ref_cnt for blk in shared] == [2, 2]
    check_invariants(s)


def test_a_fully_cached_prompt_still_computes_its_last_token() -> None:
    s = make_scheduler(block_size=4, enable_prefix_caching=True)
    make_request(s, "A", PROMPT[:8])
    step(s)
    make_request(s, "C", PROMPT[:8])
    out = step(s)
    c = next(ch for ch in out.chunks if ch.req_id == "C")
    # The whole 8-token prompt is cached, but the hit is capped at num_tokens - 1 = 7,
    # which rounds down to one whole block.
    assert (c.num_prefix_hit_tokens, c.num_tokens) == (4, 4)


def test_freed_blocks_stay_cached_and_tail_blocks_are_evicted_first() -> None:
    # vLLM 0.20: every freed block goes to the tail of the free queue.
    s = make_scheduler(
        block_size=4, num_gpu_blocks=4, enable_prefix_caching=True, vllm_version="0.20"
    )
    make_request(s, "A", PROMPT[:8], max_tokens=1)
    step(s)  # A finishes: its two cached blocks join the free queue, tail first
    pool = s.kv_cache_manager.block_pool
    assert pool.num_cached_free_blocks == 2
    make_request(s, "D", [50, 51, 52], max_tokens=1)  # takes the never-used block
    step(s)
    assert pool.num_cached_free_blocks == 2
    make_request(s, "E", [60, 61, 62], max_tokens=1)  # evicts A's *tail* block
    step(s)
    assert pool.num_cached_free_blocks == 1
    make_request(s, "F", [*PROMPT[:8], 1])
    out = step(s)
    f = next(ch for ch in out.chunks if ch.req_id == "F")
    assert f.num_prefix_hit_tokens == 4  # A's head block survived, its tail did not
    check_invariants(s)


def test_unhashed_freed_blocks_are_reused_before_cached_ones_since_0_28() -> None:
    s = make_scheduler(
        block_size=4, num_gpu_blocks=4, enable_prefix_caching=True, vllm_version="0.33"
    )
    make_request(s, "A", PROMPT[:8], max_tokens=1)
    step(s)
    pool = s.kv_cache_manager.block_pool
    make_request(s, "D", [50, 51, 52], max_tokens=1)  # the never-used block
    step(s)
    d_block = pool.free_block_queue.block_ids()[0]
    assert pool.blocks[d_block].block_hash is None  # D's unhashed block is at the head
    make_request(s, "E", [60, 61, 62], max_tokens=1)  # reuses it: A's blocks survive
    out = step(s)
    assert out.chunks[0].block_ids == (d_block,)
    assert pool.num_cached_free_blocks == 2
    make_request(s, "F", [*PROMPT[:8], 1])
    out = step(s)
    f = next(ch for ch in out.chunks if ch.req_id == "F")
    assert f.num_prefix_hit_tokens == 8
    check_invariants(s)


def test_a_resumed_request_hits_its_own_blocks_outputs_included() -> None:
    s = make_scheduler(block_size=4, num_gpu_blocks=4, enable_prefix_caching=True)
    y = make_request(s, "Y", 4, max_tokens=4)
    x = make_request(s, "X", 2, max_tokens=6)
    outs = [step(s) for _ in range(5)]
    assert [scheduled(o) for o in outs[:4]] == [
        {"Y": 4, "X": 2},
        {"Y": 1, "X": 1},
        {"Y": 1, "X": 1},
        {"Y": 1},
    ]
    assert outs[3].preempted_req_ids == ("X",)  # X asked for a 2nd block; none free
    assert y.num_output_tokens == 4
    # X resumes with 5 tokens; its first block (2 prompt + 2 output tokens) is still cached.
    assert outs[4].resumed_req_ids == ("X",)
    chunk = outs[4].chunks[0]
    assert (chunk.num_prefix_hit_tokens, chunk.num_tokens) == (4, 1)
    while s.has_unfinished_requests():
        step(s)
    alone = make_scheduler(block_size=4, num_gpu_blocks=40, enable_prefix_caching=True)
    x_alone = make_request(alone, "X", 2, max_tokens=6)
    while alone.has_unfinished_requests():
        step(alone)
    assert x.output_token_ids == x_alone.output_token_ids


def test_a_lookup_returns_the_first_cached_duplicate_until_it_is_evicted() -> None:
    # Two blocks cached under one hash (two requests filled the same content): a lookup
    # returns the first registered; once it is evicted, the other; then none.
    pool = BlockPool(6, enable_caching=True)
    a, b = pool.get_new_blocks(2, "r0")
    pool.cache_full_blocks([a], [123], 0, 1)
    pool.cache_full_blocks([b], [123], 0, 1)
    assert pool.get_cached_block(123) is a
    pool.free_blocks([a, b])  # both free, still cached: a is evicted first
    assert pool.get_cached_block(123) is a
    (c,) = pool.get_new_blocks(1, "r1")
    while c is not a:  # the free queue hands out uncached blocks before a
        (c,) = pool.get_new_blocks(1, "r1")
    assert a.block_hash is None and pool.get_cached_block(123) is b
    (d,) = pool.get_new_blocks(1, "r2")
    assert d is b and pool.get_cached_block(123) is None
    assert 123 not in pool.first_cached_block and not pool.cached_block_hash_to_block


def test_the_free_queue_takes_and_returns_runs_in_order() -> None:
    """popleft_n / append_n / prepend_n / remove keep the queue a list in eviction order
    (checked against a plain list after each of 2,000 random operations)."""
    rng = random.Random(3)
    blocks = [KVCacheBlock(i) for i in range(64)]
    queue = FreeKVCacheBlockQueue(blocks)
    model = list(range(64))
    out: list[KVCacheBlock] = []
    for _ in range(2000):
        op = rng.randrange(4)
        if op == 0:
            taken = queue.popleft_n(rng.randint(0, len(model)))
            assert [b.block_id for b in taken] == model[: len(taken)]
            del model[: len(taken)]
            out += taken
        elif op in (1, 2) and out:
            rng.shuffle(out)
            k = rng.randint(1, len(out))
            run, out = out[:k], out[k:]
            if op == 1:
                queue.append_n(run)
                model += [b.block_id for b in run]
            else:
                queue.prepend_n(run)
                model[:0] = [b.block_id for b in run]
        elif op == 3 and model:
            block = blocks[rng.choice(model)]
            queue.remove(block)
            model.remove(block.block_id)
            out.append(block)
        assert queue.block_ids() == model
        assert queue.num_free_blocks == len(model)
    with pytest.raises(ValueError):
        queue.popleft_n(len(model) + 1)
