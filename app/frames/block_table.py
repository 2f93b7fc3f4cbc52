"""The KV block map a SessionState folds: every block's latest `[id, state, owner, ref_cnt]`
and, once a snapshot asked for it, each block's JSON text kept up to date."""

from __future__ import annotations

from collections.abc import Iterable

from protocol.codes import BlockState
from protocol.envelope import encode
from protocol.wire import BlockChange

FREE = BlockState.FREE.value

Block = tuple[int, str, str | None, int]
"""(id, state, owner, ref_cnt): a tuple of plain values, which the garbage collector stops
tracking (80,000 lists would make every full collection ~60 ms)."""


class BlockTable:
    def __init__(self) -> None:
        self.kept = True
        """False: changes are not kept (a fold for the request table alone: a seek's)."""
        self.blocks: dict[int, Block] = {}
        self._text: list[str] | None = None
        """Each block's JSON, kept up to date once a snapshot asked for it (a pool of 80,000
        blocks is ~2 MB of JSON: re-encoding it whole for every poll would cost ~60 ms)."""

    def apply(self, changes: Iterable[BlockChange], total: int) -> None:
        """One step's block changes; a pool of `total` blocks (those never seen are free)."""
        if not self.kept:
            return
        blocks, texts = self.blocks, self._text
        for block_id, state, owner, ref in changes:
            blocks[block_id] = (block_id, state, owner, ref)
            if texts is not None and block_id < len(texts):
                texts[block_id] = encode([block_id, state, owner, ref])
        if not blocks or len(blocks) < total:
            self._text = None
            for i in range(1, total + 1):
                blocks.setdefault(i, (i, FREE, None, 0))

    def rows(self) -> list[BlockChange]:
        """Every block as `[id, state, owner, ref_cnt]`, by id."""
        return [list(b) for b in self.tuples()]

    def tuples(self) -> list[Block]:
        """rows() as the table's own tuples: no new object per block (a checkpoint's
        40,000 new lists were a tenth of the recorder's writer, in garbage collection)."""
        blocks = self.blocks
        try:  # a pool's ids are 1..n: no sort
            return [blocks[k] for k in range(1, len(blocks) + 1)]
        except KeyError:
            return [blocks[k] for k in sorted(blocks)]

    @classmethod
    def from_rows(cls, rows: Iterable[BlockChange] | Iterable[Block]) -> BlockTable:
        table = cls()
        table.blocks = {b[0]: (b[0], b[1], b[2], b[3]) for b in rows}
        return table

    def json(self) -> str:
        """rows() as JSON text, from the per-block cache."""
        texts = self._text
        if texts is None or len(texts) != len(self.blocks) + 1:
            ids = sorted(self.blocks)
            texts = [""] + [encode(self.blocks[k]) for k in ids]
            if ids == list(range(1, len(ids) + 1)):  # indexable by block id: keep it
                self._text = texts
        return "[" + ",".join(texts[1:]) + "]"
