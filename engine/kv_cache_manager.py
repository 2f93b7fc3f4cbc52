"""Per-request block tables over the block pool: prefix lookup, allocation, freeing.

One full-attention KV group, as in vLLM's `KVCacheManager` + `FullAttentionManager`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from itertools import islice, takewhile
from operator import is_not
from typing import cast

from engine.block_pool import BlockPool, KVCacheBlock
from engine.request import Request

_is_not_none = partial(is_not, None)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        max_model_len: int,
        enable_caching: bool,
        unhashed_first: bool = False,
    ) -> None:
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.block_pool = BlockPool(num_gpu_blocks, enable_caching, unhashed_first)
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        # How many leading blocks of each request are registered in the prefix cache.
        self.num_cached_block: dict[str, int] = {}

    @property
    def usage(self) -> float:
        return self.block_pool.get_usage()

    def get_computed_blocks(self, request: Request) -> tuple[list[KVCacheBlock], int]:
        """Longest cached full-block prefix of the request, in blocks and tokens."""
        if not self.enable_caching:
            return [], 0
        # NOTE: when every token hits, the last one must still be computed to get
        # logits, so the hit is capped at num_tokens - 1 (whole blocks only).
        max_num_blocks = (request.num_tokens - 1) // self.block_size
        # The leading run of hashes that have a cached block, looked up in C (map and
        # takewhile): a 128k prompt has thousands of blocks, scanned each step it waits.
        lookups = map(
            self.block_pool.first_cached_block.get, islice(request.block_hashes, max_num_blocks)
        )
        hits = cast(list[KVCacheBlock], list(takewhile(_is_not_none, lookups)))
        return hits, len(hits) * self.block_size

    def _num_blocks_to_allocate(
        self, request_id: str, num_tokens: int, new_computed_blocks: Sequence[KVCacheBlock]
    ) -> int:
        num_required = cdiv(num_tokens, self.block_size)
        num_held = len(self.req_to_blocks.get(request_id, ()))
        num_new = max(num_required - len(new_computed_blocks) - num_held, 0)
        # A hit block sitting in the free queue leaves it when touched: it costs a
        # free block just like a fresh allocation.
        num_evictable = 0
        for b in new_computed_blocks:
            if b.ref_cnt == 0 and not b.is_null:
                num_evictable += 1
        return num_new + num_evictable

    def num_blocks_needed(
        self, request: Request, num_tokens: int, new_computed_blocks: Sequence[KVCacheBlock]
    ) -> int:
        """Free blocks the request would take to hold `num_tokens` (hits included)."""
        num_tokens = min(num_tokens, self.max_model_len)
        return self._num_blocks_to_allocate(request.request_id, num_tokens, new_computed_blocks)

    def can_fit_full_sequence(
        self,
        request: Request,
        new_computed_blocks: Sequence[KVCacheBlock] = (),
        watermark_blocks: int = 0,
    ) -> bool:
        """Admission gate of `scheduler_reserve_full_isl`: the whole current sequence fits
        (and leaves `watermark_blocks` free)."""
        full_num_tokens = min(request.num_tokens, self.max_model_len)
        needed = self._num_blocks_to_allocate(
            request.request_id, full_num_tokens, new_computed_blocks
        )
        return needed + watermark_blocks <= self.block_pool.get_num_free_blocks()

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: Sequence[KVCacheBlock] = (),
        watermark_blocks: int = 0,
    ) -> list[KVCacheBlock] | None:
        """Give the request slots for `num_new_tokens` more tokens; None if the pool is
        short (or would keep fewer than `watermark_blocks` free: admissions, vLLM 0.24+)."""
        if num_new_tokens <= 0:
            raise ValueError("num_new_tokens must be greater than 0")
        request_id = request.request_id
        max_model_len = self.max_model_len
        total_computed = request.num_computed_tokens + num_new_computed_tokens
        if total_computed > max_model_len:
            total_computed = max_model_len
        num_tokens_need_slot = total_computed + num_new_tokens
        if num_tokens_need_slot > max_model_len:
            num_tokens_need_slot = max_model_len
        pool = self.block_pool
        req_blocks = self.req_to_blocks.get(request_id)
        if new_computed_blocks:
            needed = self._num_blocks_to_allocate(
                request_id, num_tokens_need_slot, new_computed_blocks
            )
            if needed + watermark_blocks > pool.free_block_queue.num_free_blocks:
                return None
            if req_blocks is None:
                req_blocks = self.req_to_blocks[request_id] = []
            pool.touch(new_computed_blocks)
            req_blocks.extend(new_computed_blocks)
            self.num_cached_block[request_id] = len(req_blocks)
        elif req_blocks is None:
            req_blocks = self.req_to_blocks[request_id] = []

        # Fast path for the common case (a running request): only new blocks count.
        num_new_blocks = cdiv(num_tokens_need_slot, self.block_size) - len(req_blocks)
        new_blocks: list[KVCacheBlock] = []
        if num_new_blocks > 0:
            if num_new_blocks + watermark_blocks > pool.free_block_queue.num_free_blocks:
                return None
            new_blocks = pool.get_new_blocks(num_new_blocks, request_id)
            req_blocks.extend(new_blocks)

        if self.enable_caching:
            # Blocks are registered as soon as they are planned full, so a request
            # admitted later in this same step can already hit them (as vLLM does).
            num_tokens = request.num_tokens
            end = total_computed + num_new_tokens
            num_full = (end if end < num_tokens else num_tokens) // self.block_size
            if self.num_cached_block.get(request_id, 0) < num_full:
                self._cache_blocks(request, num_full)
        return new_blocks

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        """Register the request's full blocks up to `num_computed_tokens` (async
        scheduling caches once a batch's output arrives)."""
        if not self.enable_caching:
            return
        # Only blocks whose tokens are known have hashes (vLLM caps at the hashed tokens).
        num_full = min(num_computed_tokens // self.block_size, len(request.block_hashes))
        if self.num_cached_block.get(request.request_id, 0) < num_full:
            self._cache_blocks(request, num_full)

    def _cache_blocks(self, request: Request, num_full: int) -> None:
        request_id = request.request_id
        num_cached = self.num_cached_block.get(request_id, 0)
        self.block_pool.cache_full_blocks(
            self.req_to_blocks[request_id], request.block_hashes, num_cached, num_full
        )
        self.num_cached_block[request_id] = num_full

    def free(self, request: Request) -> None:
        """Release the request's blocks, tail first, so tail blocks are evicted first."""
        blocks = self.req_to_blocks.pop(request.request_id, [])
        self.block_pool.free_blocks(reversed(blocks))
        self.num_cached_block.pop(request.request_id, None)

    def get_block_ids(self, request_id: str) -> list[int]:
        return [b.block_id for b in self.req_to_blocks.get(request_id, ())]
