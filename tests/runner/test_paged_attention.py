"""Paged attention == dense causal attention, for packed batches of chunks and decodes."""

from __future__ import annotations

import random

import pytest
import torch

from engine.runner.paged_attention import build_metadata, dense_attention, paged_attention
from tests.runner.helpers import DEVICES, blocks_for


def _random_batch(rng: random.Random, block_size: int, num_blocks: int):  # type: ignore[no-untyped-def]
    """Requests as (context_len, query_len, block_table) over shuffled, non-contiguous blocks."""
    free = list(range(1, num_blocks))
    rng.shuffle(free)
    batch = []
    for _ in range(rng.randint(1, 6)):
        ctx = rng.randint(1, 40)
        kind = rng.choice(["decode", "chunk", "whole"])
        n = 1 if kind == "decode" else ctx if kind == "whole" else rng.randint(1, ctx)
        table = [free.pop() for _ in range(blocks_for(ctx, block_size))]
        # Spare blocks past the context, as a scheduler that allocated ahead would leave.
        table += [free.pop() for _ in range(rng.randint(0, 1))]
        batch.append((ctx, n, table))
    return batch


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(8))
def test_paged_attention_equals_dense_reference(device: str, seed: int) -> None:
    rng = random.Random(seed)
    torch.manual_seed(seed)
    block_size = rng.choice([1, 4, 16])
    num_heads, num_kv_heads = rng.choice([(4, 2), (4, 4), (8, 1)])
    head_dim, num_blocks = 16, 400
    batch = _random_batch(rng, block_size, num_blocks)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    # Garbage everywhere (the null block too): only the right slots may be read.
    k_cache = torch.randn(shape, device=device) * 100
    v_cache = torch.randn(shape, device=device) * 100
    full = []
    for ctx, n, table in batch:
        k = torch.randn(ctx, num_kv_heads, head_dim, device=device)
        v = torch.randn(ctx, num_kv_heads, head_dim, device=device)
        q = torch.randn(n, num_heads, head_dim, device=device)
        for p in range(ctx - n):  # the cached part, written slot by slot
            k_cache[table[p // block_size], p % block_size] = k[p]
            v_cache[table[p // block_size], p % block_size] = v[p]
        full.append((q, k, v))
    meta = build_metadata(
        [n for _, n, _ in batch],
        [ctx for ctx, _, _ in batch],
        [table for _, _, table in batch],
        block_size,
        torch.device(device),
    )
    q_all = torch.cat([q for q, _, _ in full])
    k_new = torch.cat([k[ctx - n :] for (ctx, n, _), (_, k, _) in zip(batch, full, strict=True)])
    v_new = torch.cat([v[ctx - n :] for (ctx, n, _), (_, _, v) in zip(batch, full, strict=True)])
    scale = head_dim**-0.5
    out = paged_attention(q_all, k_new, v_new, k_cache, v_cache, meta, scale)

    qsl = meta.query_start_loc
    for i, ((ctx, n, table), (q, k, v)) in enumerate(zip(batch, full, strict=True)):
        expected = dense_attention(q, k, v, scale)
        torch.testing.assert_close(out[qsl[i] : qsl[i + 1]], expected, atol=1e-5, rtol=1e-4)
        assert meta.positions[qsl[i] : qsl[i + 1]].tolist() == list(range(ctx - n, ctx))
        last = ctx - 1  # the new K/V landed in the request's own slots
        torch.testing.assert_close(k_cache[table[last // block_size], last % block_size], k[last])


def test_dense_reference_is_causal() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 8), torch.randn(3, 2, 8), torch.randn(3, 2, 8)
    out = dense_attention(q, k, v, 8**-0.5)
    torch.testing.assert_close(out[0], v[0])  # position 0 sees only itself
    k2, v2 = k.clone(), v.clone()
    k2[2], v2[2] = 5.0, 5.0
    torch.testing.assert_close(dense_attention(q, k2, v2, 8**-0.5)[:2], out[:2])


def test_build_metadata_refuses_a_short_block_table() -> None:
    with pytest.raises(ValueError, match="block table has 1"):
        build_metadata([3], [9], [[5]], 4, torch.device("cpu"))
