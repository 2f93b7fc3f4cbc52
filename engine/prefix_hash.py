"""Chained hashes of full KV blocks, the keys of automatic prefix caching.

A block's hash covers its parent's hash and its own token ids, so equal hashes mean
equal whole prefixes. Python's hash of an int tuple is deterministic across runs.
"""

from __future__ import annotations

from collections.abc import Sequence

BlockHash = int

NONE_HASH: BlockHash = 0x5EED_B10C


def hash_block_tokens(parent: BlockHash | None, token_ids: Sequence[int]) -> BlockHash:
    return hash((NONE_HASH if parent is None else parent, tuple(token_ids)))


def extend_block_hashes(
    block_hashes: list[BlockHash], token_ids: Sequence[int], block_size: int
) -> None:
    """Append the hashes of every full block of `token_ids` not hashed yet."""
    start = len(block_hashes) * block_size
    parent = block_hashes[-1] if block_hashes else None
    while start + block_size <= len(token_ids):
        parent = hash_block_tokens(parent, token_ids[start : start + block_size])
        block_hashes.append(parent)
        start += block_size
