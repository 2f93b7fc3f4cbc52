"""KV block residency (vLLM's `--kv-cache-metrics`: block lifetime, idle time before
eviction, reuse gaps) from the block changes every iteration frame carries.

vLLM's KVCacheMetricsCollector, without its sampling (we see every block): a block is
born when it is allocated, accessed when a request touches it (a prefix-cache hit or
sharing), and evicted when its cached content is dropped -- the block handed out for
other content, or cleared. One limit of the frames: a cached block handed to a request
is either a hit or an eviction plus a fresh allocation; it counts as a hit while the
request still has prefix-hit blocks to account for (its `prefix_hit` / block_size).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from protocol.codes import BlockState

ACCESS_HISTORY = 4
"""Accesses kept per block for reuse gaps (vLLM's BlockMetricsState)."""
HELD = ("used", "shared")
CACHED = BlockState.CACHED.value
"""(A plain string: read for every block change; an enum member's compare is slower.)"""
FREE_UNSEEN = ("free", 0)
"""A block no frame has named yet: free, no references."""

Tracked = tuple[float, float, "deque[float] | None"]
"""A resident block: (born, last access, its last accesses -- None until the first). Until
then a tuple of floats and None, which the garbage collector stops tracking."""


@dataclass(slots=True)
class Evicted:
    """One step's evictions as the histograms take them, in order: each evicted block's
    lifetime and idle time before eviction, and the reuse gaps of them all."""

    lifetimes_s: list[float] = field(default_factory=list)
    idles_s: list[float] = field(default_factory=list)
    reuse_gaps_s: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.lifetimes_s)

    def add(self, tracked: Tracked, t: float) -> None:
        """The block `tracked` evicted at `t`."""
        born, last_access, accesses = tracked
        self.lifetimes_s.append(t - born)
        self.idles_s.append(t - last_access)
        if accesses is not None and len(accesses) > 1:
            self.reuse_gaps_s.extend(b - a for a, b in itertools.pairwise(accesses))


class BlockResidency:
    def __init__(self) -> None:
        self._blocks: dict[int, Tracked] = {}
        self._state: dict[int, tuple[str, int]] = {}
        """block id -> (state, ref count) as of the last frame."""

    def step(
        self, t: float, changes: Iterable[Sequence[Any]], hit_blocks: dict[str, int]
    ) -> Evicted:
        """Fold one frame's `blocks` ([id, state, owner, ref]) at time `t`; `hit_blocks`:
        per request admitted this step, how many of its blocks were prefix-cache hits
        (consumed here). Returns the evictions. (Every iteration of a flat-out engine
        hands ~200 blocks over, a quarter of them evicted: one pass, no object per block.)"""
        out = Evicted()
        blocks, states = self._blocks, self._state
        for block_id, state, owner, ref in changes:
            before, before_ref = states.get(block_id, FREE_UNSEEN)
            states[block_id] = (state, ref)
            if state == CACHED:
                continue  # freed with its content: still resident, evictable
            if state in HELD:
                if before == CACHED and hit_blocks and hit_blocks.get(owner, 0) > 0:
                    hit_blocks[owner] -= 1
                    self._touch(block_id, t)
                elif before in HELD:
                    if ref > before_ref:
                        self._touch(block_id, t)
                else:
                    if before == CACHED:
                        tracked = blocks.get(block_id)
                        if tracked is not None:
                            out.add(tracked, t)
                    blocks[block_id] = (t, t, None)
            else:  # free or withheld: the content is gone
                tracked = blocks.pop(block_id, None)
                if before == CACHED and tracked is not None:
                    out.add(tracked, t)
        return out

    def _touch(self, block_id: int, t: float) -> None:
        tracked = self._blocks.get(block_id)
        if tracked is None:
            self._blocks[block_id] = (t, t, deque((t,), maxlen=ACCESS_HISTORY))
            return
        born, _, accesses = tracked
        if accesses is None:
            accesses = deque((t,), maxlen=ACCESS_HISTORY)
        else:
            accesses.append(t)
        self._blocks[block_id] = (born, t, accesses)
