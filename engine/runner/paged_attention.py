"""Paged attention for the packed forward: write new K/V by slot, attend through block tables.

Cache layout, per layer: K and V are each `[num_blocks, block_size, num_kv_heads, head_dim]`.
Position `p` of a request lives in flat slot
`block_table[p // block_size] * block_size + p % block_size`.

A packed batch holds B requests; request i contributes `query_lens[i]` new tokens (a prefill
chunk, a recompute, or a single decode token) at the end of its `context_lens[i]` positions
(cached + new). `build_metadata` turns that into tensors once per step; `paged_attention`
then, per layer, writes the new K/V into their slots and lets each query attend causally to
its own request's context, gathered through the block table. Decodes (one query each) are
batched into one padded attention call; prefill chunks are attended one request at a time.
`dense_attention` is the plain reference the tests compare against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.kv_cache_manager import cdiv


@dataclass(frozen=True)
class PrefillPlan:
    """One multi-token chunk: query rows `start:end` attend to the slots in `slots`."""

    start: int
    end: int
    slots: torch.Tensor
    """[context_len] flat slot of each context position."""
    mask: torch.Tensor
    """[num_queries, context_len] bool, True where the query may attend (causal)."""


@dataclass(frozen=True)
class AttentionMetadata:
    """The packing of one step, shared by every layer."""

    positions: torch.Tensor
    """[T] absolute position of each packed token."""
    slot_mapping: torch.Tensor
    """[T] flat cache slot each new token's K/V is written to."""
    query_start_loc: tuple[int, ...]
    """[B + 1] request i's queries are rows query_start_loc[i]:query_start_loc[i + 1]."""
    context_lens: tuple[int, ...]
    """[B] cached + new tokens of each request."""
    block_tables: torch.Tensor
    """[B, max_blocks] block ids, padded with the null block 0."""
    prefills: tuple[PrefillPlan, ...]
    decode_rows: torch.Tensor | None
    """[Bd] query rows of the single-token requests, or None when there are none."""
    decode_slots: torch.Tensor | None
    """[Bd, max_context] slots of their contexts (padding points at slot 0, masked)."""
    decode_mask: torch.Tensor | None
    """[Bd, 1, 1, max_context] bool."""


def build_metadata(
    query_lens: list[int],
    context_lens: list[int],
    block_tables: list[list[int]],
    block_size: int,
    device: torch.device,
) -> AttentionMetadata:
    """Positions, slots and gather plans for a packed batch (built on CPU, then moved)."""
    num_reqs = len(query_lens)
    if not (num_reqs == len(context_lens) == len(block_tables)) or num_reqs == 0:
        raise ValueError("build_metadata: need one query_len, context_len and table per request")
    max_ctx = max(context_lens)
    width = cdiv(max_ctx, block_size)
    tables = torch.zeros((num_reqs, width), dtype=torch.long)
    for i, (table, ctx, n) in enumerate(zip(block_tables, context_lens, query_lens, strict=True)):
        needed = cdiv(ctx, block_size)
        if not 0 < n <= ctx or len(table) < needed:
            raise ValueError(
                f"request {i}: {n} new tokens, context {ctx}, needs {needed} blocks "
                f"but its block table has {len(table)}"
            )
        tables[i, :needed] = torch.tensor(table[:needed], dtype=torch.long)
    pos = torch.arange(max_ctx)
    # [B, max_ctx] slot of every context position of every request (garbage past ctx).
    all_slots = tables[:, pos // block_size] * block_size + pos % block_size

    lens = torch.tensor(query_lens)
    ctx_t = torch.tensor(context_lens)
    req_of_row = torch.repeat_interleave(torch.arange(num_reqs), lens)
    starts = torch.cumsum(lens, 0) - lens
    row_in_req = torch.arange(int(lens.sum())) - starts[req_of_row]
    positions = (ctx_t - lens)[req_of_row] + row_in_req
    slot_mapping = all_slots[req_of_row, positions]

    qsl = [0]
    for n in query_lens:
        qsl.append(qsl[-1] + n)
    prefills = []
    decodes = []
    for i, (n, ctx) in enumerate(zip(query_lens, context_lens, strict=True)):
        if n == 1:
            decodes.append(i)
            continue
        q_pos = torch.arange(ctx - n, ctx).unsqueeze(1)
        mask = torch.arange(ctx).unsqueeze(0) <= q_pos
        prefills.append(
            PrefillPlan(qsl[i], qsl[i + 1], all_slots[i, :ctx].to(device), mask.to(device))
        )
    decode_rows = decode_slots = decode_mask = None
    if decodes:
        idx = torch.tensor(decodes)
        dctx = ctx_t[idx]
        dmax = int(dctx.max())
        decode_rows = torch.tensor([qsl[i] for i in decodes]).to(device)
        decode_slots = all_slots[idx, :dmax].to(device)
        decode_mask = (pos[:dmax].unsqueeze(0) < dctx.unsqueeze(1)).view(len(decodes), 1, 1, dmax)
        decode_mask = decode_mask.to(device)
    return AttentionMetadata(
        positions=positions.to(device),
        slot_mapping=slot_mapping.to(device),
        query_start_loc=tuple(qsl),
        context_lens=tuple(context_lens),
        block_tables=tables.to(device),
        prefills=tuple(prefills),
        decode_rows=decode_rows,
        decode_slots=decode_slots,
        decode_mask=decode_mask,
    )


def write_kv(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Store new K/V `[T, num_kv_heads, head_dim]` into their flat slots."""
    num_kv_heads, head_dim = k_cache.shape[-2:]
    k_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, k)
    v_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, v)


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """q `[T, Hq, D]`, new k/v `[T, Hkv, D]` -> attention output `[T, Hq, D]`."""
    write_kv(k_cache, v_cache, k, v, meta.slot_mapping)
    num_kv_heads, head_dim = k_cache.shape[-2:]
    k_flat = k_cache.view(-1, num_kv_heads, head_dim)
    v_flat = v_cache.view(-1, num_kv_heads, head_dim)
    out = torch.empty_like(q)
    for plan in meta.prefills:
        # [1, H, n, D] queries against [1, Hkv, ctx, D] context; GQA by head groups.
        out[plan.start : plan.end] = F.scaled_dot_product_attention(
            q[plan.start : plan.end].transpose(0, 1).unsqueeze(0),
            k_flat[plan.slots].transpose(0, 1).unsqueeze(0),
            v_flat[plan.slots].transpose(0, 1).unsqueeze(0),
            attn_mask=plan.mask,
            scale=scale,
            enable_gqa=True,
        )[0].transpose(0, 1)
    if meta.decode_rows is not None:
        assert meta.decode_slots is not None and meta.decode_mask is not None
        qd = q[meta.decode_rows].unsqueeze(2)  # [Bd, Hq, 1, D]
        kd = k_flat[meta.decode_slots].transpose(1, 2)  # [Bd, Hkv, ctx, D]
        vd = v_flat[meta.decode_slots].transpose(1, 2)
        od = F.scaled_dot_product_attention(
            qd, kd, vd, attn_mask=meta.decode_mask, scale=scale, enable_gqa=True
        )
        out[meta.decode_rows] = od.squeeze(2)
    return out


def dense_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> torch.Tensor:
    """Reference: q `[n, Hq, D]` are the last n positions of a sequence whose full K/V are
    `[ctx, Hkv, D]`; plain causal softmax attention in float32."""
    n, num_heads, _ = q.shape
    ctx, num_kv_heads, _ = k.shape
    group = num_heads // num_kv_heads
    kf = k.float().repeat_interleave(group, dim=1).transpose(0, 1)  # [Hq, ctx, D]
    vf = v.float().repeat_interleave(group, dim=1).transpose(0, 1)
    scores = q.float().transpose(0, 1) @ kf.transpose(1, 2) * scale  # [Hq, n, ctx]
    q_pos = torch.arange(ctx - n, ctx, device=q.device).unsqueeze(1)
    allowed = torch.arange(ctx, device=q.device).unsqueeze(0) <= q_pos
    scores = scores.masked_fill(~allowed, float("-inf"))
    return (scores.softmax(-1) @ vf).transpose(0, 1).to(q.dtype)
