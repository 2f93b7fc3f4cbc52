"""Prompt block hashes: a content key for each block of a prompt, as Mooncake-style traces
number their `hash_ids` (engine.mooncake writes them; the vLLM adapter sends them for a
node's prompts, whose tokens it does not send).

Block j of a prompt is tokens [j*B, (j+1)*B) (the last block may be partial, as in the
traces). Its key is a chain hash of block j-1's key and block j's tokens, so a key stands
for the whole prompt up to the end of its block: equal keys, equal prefixes; anything
different before, a different key. The key depends on the tokens only (not on the
request, the process or the run). 64-bit BLAKE2b, sent as 16 hex digits (exact in
JSON and in JavaScript, unlike a 64-bit integer). Standard library only.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from hashlib import blake2b

PROMPT_BLOCK_TOKENS = 512
"""The adapter's block: the traces' convention. An export at a multiple of it reads every
k-th key (a key covers its whole prefix); finer blocks cannot be recovered."""
_BIG_ENDIAN = sys.byteorder == "big"
_UINT32 = next(code for code in "IL" if array(code).itemsize == 4)


def block_keys(
    token_ids: Sequence[int], block_tokens: int = PROMPT_BLOCK_TOKENS, num_tokens: int | None = None
) -> list[bytes]:
    """The chain keys (8-byte digests) of the blocks of the prompt's first `num_tokens`
    tokens (default: all), in order."""
    n = len(token_ids) if num_tokens is None else min(num_tokens, len(token_ids))
    keys: list[bytes] = []
    parent = b""
    for start in range(0, n, block_tokens):
        parent = blake2b(parent + _bytes(token_ids[start : min(start + block_tokens, n)]),
                         digest_size=8).digest()  # fmt: skip
        keys.append(parent)
    return keys


def _bytes(tokens: Sequence[int]) -> bytes:
    """A block's tokens as little-endian uint32 (5x cheaper to convert than int64), or,
    tagged so the two can never be equal, int64 when one does not fit."""
    try:
        arr, tag = array(_UINT32, tokens), b""
    except OverflowError:  # (the tag makes the length odd: never equal to a uint32 block)
        arr, tag = array("q", tokens), b"q"
    if _BIG_ENDIAN:
        arr.byteswap()
    return tag + arr.tobytes()


def prompt_block_hashes(
    token_ids: Sequence[int], block_tokens: int = PROMPT_BLOCK_TOKENS, num_tokens: int | None = None
) -> list[str]:
    """The keys of the prompt's blocks as hex strings (a request mark's
    `prompt_block_hashes`)."""
    return [k.hex() for k in block_keys(token_ids, block_tokens, num_tokens)]


def coarser(hashes: Sequence[str], block_tokens: int, num_tokens: int, want: int) -> list[str]:
    """The keys of `want`-token blocks from those of `block_tokens`-token blocks of the same
    `num_tokens`-token prompt: block i of `want` tokens ends where key
    min((i+1)*k, len) - 1 ends (k = want / block_tokens). ValueError unless `want` is a
    multiple of `block_tokens`."""
    if want % block_tokens:
        raise ValueError(
            f"block_tokens: this recording knows its prompts by {block_tokens}-token blocks "
            f"only; use a multiple of {block_tokens}"
        )
    k = want // block_tokens
    count = -(-num_tokens // want)
    last = len(hashes)
    return [hashes[min((i + 1) * k, last) - 1] for i in range(count)] if last else []
