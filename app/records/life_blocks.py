"""The KV blocks one request held over its life, read from the block changes of the frames.

A frame lists only the blocks that changed, each with the request that allocated it
(`owner`; a shared block keeps its first owner) and its ref_cnt. So a request's own blocks
are the changed blocks it owns; the blocks it took by a prefix-cache hit are inferred at
its admission step (blocks owned by another request whose ref_cnt went up then, or cached
blocks taken back into use); who shares a block is inferred from the admissions with a hit
in the steps where its ref_cnt rose. When several requests were admitted with a hit in the
same step the attribution is marked `inferred`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from app.records.life_types import HeldBlock
from protocol.codes import HELD_BLOCK_STATES, BlockState
from protocol.wire import BlockChange, ScheduledRow

HELD = tuple(s.value for s in HELD_BLOCK_STATES)
SHARED = BlockState.SHARED.value


@dataclass(slots=True)
class Held:
    block: int
    start: int
    own: bool
    owner: str | None
    ref: int
    end: int | None = None
    max_ref: int = 1
    shared_with: set[str] = field(default_factory=set)
    inferred: bool = False

    def as_dict(self) -> HeldBlock:
        return {
            "block": self.block,
            "from": self.start,
            "to": self.end,
            "own": self.own,
            "owner": self.owner,
            "max_ref": self.max_ref,
            "shared_with": sorted(self.shared_with),
            "inferred": self.inferred,
        }


class BlockTrack:
    """Folds one step's block changes at a time (`step`), for request `req`."""

    def __init__(self, req: str) -> None:
        self.req = req
        self.held: dict[int, Held] = {}
        self.done: list[Held] = []

    def step(
        self,
        step: int,
        changes: list[BlockChange],
        scheduled: Callable[[], list[ScheduledRow]],
        admitted_with_hit: bool,
    ) -> None:
        """`scheduled()`: the step's scheduled rows (read only when needed: who else was
        admitted with a hit); `admitted_with_hit`: our request was, this step."""
        rows: list[ScheduledRow] | None = None

        def others() -> set[str]:
            nonlocal rows
            rows = scheduled() if rows is None else rows
            return {r["req"] for r in rows if r.get("prefix_hit") and r["req"] != self.req}

        def running() -> set[str]:
            nonlocal rows
            rows = scheduled() if rows is None else rows
            return {r["req"] for r in rows}

        for block, state, owner, ref in changes:
            held = self.held.get(block)
            if held is not None:
                if state not in HELD or owner != held.owner:
                    self._close(held, step - 1)
                    held = None
                else:
                    if ref > held.ref:
                        joined = others()
                        held.shared_with |= joined
                        held.inferred = held.inferred or len(joined) > 1
                    if state == SHARED and not held.own and held.owner:
                        held.shared_with.add(held.owner)
                    held.ref = ref
                    held.max_ref = max(held.max_ref, ref)
                    continue
            if state not in HELD:
                continue
            if owner == self.req:
                self.held[block] = Held(block, step, True, owner, ref, max_ref=ref)
            elif admitted_with_hit and (state == SHARED or owner not in running()):
                # A prefix-cache hit of ours: another request's block (now shared) or a
                # cached block taken back into use.
                h = Held(block, step, False, owner, ref, max_ref=ref, inferred=bool(others()))
                if state == SHARED and owner:
                    h.shared_with.add(owner)
                self.held[block] = h

    def release_all(self, step: int) -> None:
        """The request was preempted or finished in `step`: it held them through step-1."""
        for held in list(self.held.values()):
            self._close(held, step - 1)

    def _close(self, held: Held, end: int) -> None:
        held.end = max(end, held.start)
        self.done.append(held)
        del self.held[held.block]

    def result(self) -> list[HeldBlock]:
        rows = [h.as_dict() for h in self.done] + [h.as_dict() for h in self.held.values()]
        rows.sort(key=lambda r: (r["from"], r["block"]))
        return rows
