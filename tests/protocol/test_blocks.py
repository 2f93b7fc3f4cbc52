"""Prompt block hashes (protocol.blocks): keyed by content only, a key standing for its
whole prefix, coarser blocks read from finer keys."""

from __future__ import annotations

import pytest

from protocol.blocks import block_keys, coarser, prompt_block_hashes


def test_equal_prefixes_give_equal_keys_and_a_key_covers_everything_before_it() -> None:
    shared = [7 + j % 300 for j in range(1024)]
    a = prompt_block_hashes(shared + [1] * 100)
    b = prompt_block_hashes(shared + [2] * 300)
    assert len(a) == 3 and len(b) == 3  # the last block may be partial, as in the traces
    assert a[:2] == b[:2] and a[2] != b[2]
    # The same second block after a different first one: a different key.
    c = prompt_block_hashes([9] * 512 + shared[512:])
    assert c[1] != a[1]
    assert all(len(h) == 16 and int(h, 16) >= 0 for h in a + b + c)
    # Only the first num_tokens count (a list extended later hashes as before).
    assert prompt_block_hashes(shared + [1] * 100 + [3] * 50, num_tokens=1124) == a
    # Ids past 32 bits hash too, never equal to a block of small ids.
    big = block_keys([2**40, *shared[1:512]])
    assert len(big) == 1 and big != block_keys(shared[:512])


def test_coarser_blocks_read_every_kth_key() -> None:
    prompt = list(range(2600))
    fine = prompt_block_hashes(prompt, 512)
    assert len(fine) == 6  # 5 full blocks and 40 tokens
    assert coarser(fine, 512, 2600, 512) == fine
    assert coarser(fine, 512, 2600, 1024) == [fine[1], fine[3], fine[5]]
    assert coarser(fine, 512, 2600, 4096) == [fine[5]]
    with pytest.raises(ValueError, match="multiple of 512"):
        coarser(fine, 512, 2600, 100)
