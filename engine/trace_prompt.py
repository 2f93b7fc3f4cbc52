"""A trace request's prompt known by its lengths and its chain of block hash ids (Mooncake's
`hash_ids`), its tokens made only when something reads them (the torch runner).

Token values are engine.mooncake's importer's: block i of hash id h is the same tokens
wherever h appears (`block:h`), a partial last block is their prefix, and tokens past the
ids' blocks are the request's own (`request:index`). So a run from a TracePrompt feeds the
runner exactly what a run from the imported token lists does.

Prefix caching needs no tokens: the hash of an engine block (`block_size` tokens, any size)
chains its parent's hash with the block's *position keys*, one run per trace block it
overlaps, `(hash id, first offset, end offset)` (the request's own tail: `(-1 - index, ...)`).
Two prompts share an engine block exactly where their trace chains and positions coincide,
as their tokens would; a block that reaches past the prompt into output tokens is hashed
from its tokens (engine.prefix_hash), after the same parent.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any, overload

from engine.prefix_hash import NONE_HASH, BlockHash

TOKEN_LOW = 3
"""Byte-level token ids start here (engine.workload.TOKEN_LOW; repeated to import nothing)."""


@lru_cache(maxsize=4096)
def _seeded_bytes(seed: str, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


class TracePrompt(Sequence[int]):
    """Prompt of trace request `index`: `length` tokens over `hash_ids` blocks of
    `block_tokens` tokens (ids may cover less than the prompt: the rest is its own)."""

    __slots__ = ("block_tokens", "hash_ids", "length", "request_index")

    def __init__(self, hash_ids: Sequence[int], length: int, block_tokens: int, index: int) -> None:
        if length < 1 or block_tokens < 1:
            raise ValueError("a trace prompt needs length >= 1 and block_tokens >= 1")
        if len(hash_ids) > -(-length // block_tokens):
            raise ValueError(f"{len(hash_ids)} hash ids for {length} tokens")
        self.hash_ids = tuple(hash_ids)
        self.length = length
        self.block_tokens = block_tokens
        self.request_index = index

    # ------------------------------------------------------------------ tokens
    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> list[int]: ...

    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            start, stop, step = i.indices(self.length)
            tokens = self.tokens(start, max(start, stop))
            return tokens if step == 1 else tokens[::step]
        if i < 0:
            i += self.length
        if not 0 <= i < self.length:
            raise IndexError("trace prompt index out of range")
        return self.tokens(i, i + 1)[0]

    def __iter__(self) -> Iterator[int]:
        return iter(self.tokens(0, self.length))

    def _covered(self) -> int:
        return min(self.length, len(self.hash_ids) * self.block_tokens)

    def tokens(self, start: int, end: int) -> list[int]:
        """The token ids of positions start .. end-1 (the importer's)."""
        bt = self.block_tokens
        covered = self._covered()
        out = bytearray()
        pos = start
        while pos < end and pos < covered:
            j, off = divmod(pos, bt)
            stop = min(end, covered, (j + 1) * bt)
            out += _seeded_bytes(f"block:{self.hash_ids[j]}", bt)[off : off + stop - pos]
            pos = stop
        if pos < end:
            tail = _seeded_bytes(f"request:{self.request_index}", self.length - covered)
            out += tail[pos - covered : end - covered]
        return [TOKEN_LOW + b for b in out]

    # ------------------------------------------------------------------ hashes
    def block_hashes(self, block_size: int) -> list[BlockHash]:
        """Hashes of the prompt's full engine blocks of `block_size` tokens, chained."""
        bt = self.block_tokens
        covered = self._covered()
        own = -1 - self.request_index
        out: list[BlockHash] = []
        parent = NONE_HASH
        hash_ids = self.hash_ids
        for start in range(0, self.length - block_size + 1, block_size):
            end = start + block_size
            j, off = divmod(start, bt)
            if end <= covered and off + block_size <= bt:
                # The common case: the block lies inside one trace block (one run).
                parent = hash((parent, ((hash_ids[j], off, off + block_size),)))
                out.append(parent)
                continue
            runs: list[tuple[int, int, int]] = []
            pos = start
            while pos < end and pos < covered:
                j, off = divmod(pos, bt)
                stop = min(end, covered, (j + 1) * bt)
                runs.append((self.hash_ids[j], off, off + stop - pos))
                pos = stop
            if pos < end:
                runs.append((own, pos - covered, end - covered))
            parent = hash((parent, tuple(runs)))
            out.append(parent)
        return out

    def as_dict(self) -> dict[str, Any]:
        """Enough to make the prompt again (a recording's arrival, a re-run)."""
        return {
            "hash_ids": list(self.hash_ids),
            "input_length": self.length,
            "block_tokens": self.block_tokens,
            "index": self.request_index,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TracePrompt:
        return cls(
            [int(h) for h in d["hash_ids"]],
            int(d["input_length"]),
            int(d["block_tokens"]),
            int(d["index"]),
        )


class TraceTokenIds(Sequence[int]):
    """A request's token ids (Request.token_ids) over a TracePrompt: the prompt stays lazy,
    output tokens are a plain list appended to."""

    __slots__ = ("outputs", "prompt")

    def __init__(self, prompt: TracePrompt) -> None:
        self.prompt = prompt
        self.outputs: list[int] = []

    def __len__(self) -> int:
        return self.prompt.length + len(self.outputs)

    def append(self, token_id: int) -> None:
        self.outputs.append(token_id)

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> list[int]: ...

    def __getitem__(self, i: int | slice) -> int | list[int]:
        num_prompt = self.prompt.length
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            stop = max(start, stop)
            out = self.prompt.tokens(start, min(stop, num_prompt)) if start < num_prompt else []
            out += self.outputs[max(0, start - num_prompt) : max(0, stop - num_prompt)]
            return out if step == 1 else out[::step]
        if i < 0:
            i += len(self)
        if i >= num_prompt:
            return self.outputs[i - num_prompt]
        return self.prompt[i]

    def __iter__(self) -> Iterator[int]:
        yield from self.prompt
        yield from self.outputs

    def span(self, start: int, end: int) -> Sequence[int]:
        """Positions start .. end-1: past the prompt (a decode's) a tuple of the output
        ids, else a lazy TokenSpan."""
        num_prompt = self.prompt.length
        if start >= num_prompt:
            return tuple(self.outputs[start - num_prompt : max(start, end) - num_prompt])
        return TokenSpan(self, start, max(start, min(end, len(self))))


class TokenSpan(Sequence[int]):
    """Positions start .. end-1 of a TraceTokenIds, read only when asked: a step's input
    ids (ScheduledChunk.token_ids), of which the SimRunner reads only the last."""

    __slots__ = ("end", "start", "tokens")

    def __init__(self, tokens: TraceTokenIds, start: int, end: int) -> None:
        self.tokens = tokens
        self.start = start
        self.end = end

    def __len__(self) -> int:
        return self.end - self.start

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> list[int]: ...

    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            return self.tokens[self.start + start : self.start + stop : step]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("token span index out of range")
        return self.tokens[self.start + i]

    def __iter__(self) -> Iterator[int]:
        return iter(self.tokens[self.start : self.end])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))
