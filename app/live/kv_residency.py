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
from typing import Any, NamedTuple

from protocol.codes import BlockState

ACCESS_HISTORY = 4
"""Accesses kept per block for reuse gaps (vLLM's BlockMetricsState)."""
HELD = ("used", "shared")
CACHED = BlockState.CACHED.value
"""(A plain string: read for every block change; an enum member's compare is slower.)"""


class Eviction(NamedTuple):
    lifetime_s: float
    idle_s: float
    reuse_gaps_s: tuple[float, ...]


@dataclass(slots=True)
class _Block:
    born: float
    last_access: float
    accesses: deque[float] = field(default_factory=lambda: deque(maxlen=ACCESS_HISTORY))

    def evicted(self, t: float) -> Eviction:
        history = self.accesses
        gaps = tuple(b - a for a, b in itertools.pairwise(history)) if len(history) > 1 else ()
        return Eviction(t - self.born, t - self.last_access, gaps)


class BlockResidency:
    def __init__(self) -> None:
        self._blocks: dict[int, _Block] = {}
        self._state: dict[int, tuple[str, int]] = {}
        """block id -> (state, ref count) as of the last frame."""

    def step(
        self, t: float, changes: Iterable[Sequence[Any]], hit_blocks: dict[str, int]
    ) -> list[Eviction]:
        """Fold one frame's `blocks` ([id, state, owner, ref]) at time `t`; `hit_blocks`:
        per request admitted this step, how many of its blocks were prefix-cache hits
        (consumed here). Returns the evictions."""
        out: list[Eviction] = []
        for block_id, state, owner, ref in changes:
            before, before_ref = self._state.get(block_id, ("free", 0))
            self._state[block_id] = (state, ref)
            tracked = self._blocks.get(block_id)
            if state in HELD:
                if before == CACHED and hit_blocks.get(owner, 0) > 0:
                    hit_blocks[owner] -= 1
                    self._touch(block_id, t)
                elif before in HELD:
                    if ref > before_ref:
                        self._touch(block_id, t)
                else:
                    if before == CACHED and tracked is not None:
                        out.append(tracked.evicted(t))
                    self._blocks[block_id] = _Block(t, t)
            elif state == CACHED:
                continue  # freed with its content: still resident, evictable
            else:  # free or withheld: the content is gone
                if before == CACHED and tracked is not None:
                    out.append(tracked.evicted(t))
                self._blocks.pop(block_id, None)
        return out

    def _touch(self, block_id: int, t: float) -> None:
        tracked = self._blocks.get(block_id)
        if tracked is None:
            tracked = self._blocks[block_id] = _Block(t, t)
        tracked.last_access = t
        tracked.accesses.append(t)
