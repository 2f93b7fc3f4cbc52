"""Mooncake-style JSONL traces in and out: one request a line,
`{"timestamp": ms, "input_length": N, "output_length": M, "hash_ids": [...]}`, where equal
hash ids stand for equal prompt blocks of `block_tokens` tokens (512 by the traces'
convention; the last block of a prompt may be partial).

In (`trace_scenario`): each request becomes a scenario request arriving at its timestamp
(`arrival_time_ms`), its prompt kept as its block chain (`trace_prompt`, engine.trace_prompt;
`tokens=True` writes it out token by token), standing for tokens such that block i of hash
id h is the same tokens wherever h appears (tokens derived from h alone; a partial last
block is their prefix), tokens past the ids' blocks unique to the request, and
`output_length` as `max_tokens`
(EOS never stops a request here, so each produces that many).

Out (`BlockNumbering`): hash ids from a prompt's blocks, the key of a block being a chain
hash of its parent's key and its tokens (protocol.blocks: equal content after an equal
prefix, equal id), numbered 0, 1, ... in order of first appearance; or from such keys
recorded without the prompt (a vLLM node's). A trace whose ids mean one content each
(a partial last block with an id of its own), numbered in order of first appearance and
covering whole prompts, comes back from import -> run -> export unchanged.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.request import SamplingParams
from engine.scenario import ScenarioRequest
from engine.trace_prompt import TracePrompt
from engine.workload import TOKEN_LOW
from protocol.blocks import block_keys

DEFAULT_BLOCK_TOKENS = 512
MAX_TRACE_REQUESTS = 200_000
MAX_LINE_CHARS = 1 << 20
_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


class TraceError(ValueError):
    """A trace that cannot be used; the message starts with the line at fault."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}" if line else message)
        self.line = line


@dataclass(frozen=True, slots=True)
class TraceRow:
    line: int
    """1-based line number in the file."""
    timestamp: float
    """Milliseconds from the trace's start."""
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def _length(line: int, obj: dict[str, Any], key: str) -> int:
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(line, f"{key}: must be an integer, got {json.dumps(value)[:40]}")
    if value < 1:
        raise TraceError(line, f"{key}: must be at least 1, got {value}")
    return value


def parse_line(
    line: int, text: str, block_tokens: int, max_model_len: int | None = None
) -> TraceRow:
    """One trace line; TraceError names the line and the field at fault."""
    if len(text) > MAX_LINE_CHARS:
        raise TraceError(line, f"longer than {MAX_LINE_CHARS} characters")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(line, f"not valid JSON ({exc.msg}, column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise TraceError(line, "must be a JSON object")
    missing = [k for k in _FIELDS if k not in obj]
    if missing:
        raise TraceError(line, f"missing field {', '.join(missing)} (each line needs "
                         f"{', '.join(_FIELDS)})")  # fmt: skip
    ts = obj["timestamp"]
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        raise TraceError(line, "timestamp: must be a number of milliseconds")
    if ts < 0:
        raise TraceError(line, f"timestamp: must be >= 0, got {ts}")
    n_in = _length(line, obj, "input_length")
    n_out = _length(line, obj, "output_length")
    ids = obj["hash_ids"]
    if not isinstance(ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in ids
    ):
        raise TraceError(line, "hash_ids: must be a list of integers >= 0")
    blocks = -(-n_in // block_tokens)
    if len(ids) > blocks:
        raise TraceError(
            line,
            f"hash_ids: {len(ids)} ids, but input_length {n_in} is only {blocks} block(s) of "
            f"{block_tokens} tokens (is --block-tokens right?)",
        )
    if max_model_len is not None and n_in + n_out > max_model_len:
        raise TraceError(
            line,
            f"input_length {n_in} + output_length {n_out} = {n_in + n_out} tokens does not fit "
            f"max_model_len {max_model_len}",
        )
    return TraceRow(line, float(ts), n_in, n_out, tuple(ids))


def parse_trace(
    lines: Iterable[str], block_tokens: int = DEFAULT_BLOCK_TOKENS, max_model_len: int | None = None
) -> list[TraceRow]:
    """Every request of a trace (blank lines are skipped, their numbers still count)."""
    rows = list(iter_trace(lines, block_tokens, max_model_len))
    if not rows:
        raise TraceError(0, "no requests (an empty trace)")
    return rows


def iter_trace(
    lines: Iterable[str], block_tokens: int = DEFAULT_BLOCK_TOKENS, max_model_len: int | None = None
) -> Iterator[TraceRow]:
    """The trace's requests one by one as the lines are read, holding only the last one:
    a trace is read in arrival order and must be sorted by timestamp (Mooncake's are), so
    an unsorted line is a TraceError naming it and the line it comes before, never a sort
    of the whole file. An empty trace yields nothing."""
    if block_tokens < 1:
        raise TraceError(0, "--block-tokens: must be at least 1")
    last: TraceRow | None = None
    count = 0
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        row = parse_line(number, text, block_tokens, max_model_len)
        if last is not None and row.timestamp < last.timestamp:
            raise TraceError(
                number,
                f"timestamp {row.timestamp:g} is before line {last.line}'s "
                f"{last.timestamp:g}: a trace must be sorted by timestamp",
            )
        count += 1
        if count > MAX_TRACE_REQUESTS:
            raise TraceError(number, f"more than {MAX_TRACE_REQUESTS} requests")
        last = row
        yield row


def read_trace(
    path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS, max_model_len: int | None = None
) -> list[TraceRow]:
    """parse_trace of a file; OSError / UnicodeDecodeError are the caller's to word."""
    with Path(path).open(encoding="utf-8") as fh:
        return parse_trace(fh, block_tokens, max_model_len)


class BlockTokens:
    """The tokens of trace blocks: block h is the same tokens wherever it appears; tokens
    of `unique(i, n)` (request i's own) differ from every block's (seeds never collide)."""

    def __init__(self, block_tokens: int) -> None:
        self.block_tokens = block_tokens
        self._cache: dict[int, list[int]] = {}

    @staticmethod
    def _tokens(seed: str, n: int) -> list[int]:
        return [TOKEN_LOW + b for b in random.Random(seed).randbytes(n)]

    def block(self, hash_id: int) -> list[int]:
        tokens = self._cache.get(hash_id)
        if tokens is None:
            tokens = self._cache[hash_id] = self._tokens(f"block:{hash_id}", self.block_tokens)
        return tokens

    def prompt(self, index: int, row: TraceRow) -> list[int]:
        """Request `index`'s prompt: its ids' blocks, then its own tokens up to the length."""
        out: list[int] = []
        for h in row.hash_ids:
            out += self.block(h)
        if len(out) < row.input_length:
            out += self._tokens(f"request:{index}", row.input_length - len(out))
        del out[row.input_length :]
        return out


def trace_requests(
    rows: Sequence[TraceRow], block_tokens: int, tokens: bool = False
) -> list[dict[str, Any]]:
    """The scenario requests of a trace (engine/scenario.py's format): each prompt as its
    block chain (`trace_prompt`, engine.trace_prompt: about the trace's own size, tokens
    made only where a model runs), or with `tokens` written out token by token (the same
    ids the chain stands for)."""
    blocks = BlockTokens(block_tokens)
    return [
        {
            "id": f"trace-{i}",
            "arrival_time_ms": row.timestamp,
            **(
                {"prompt_token_ids": blocks.prompt(i, row)}
                if tokens
                else {"trace_prompt": _prompt(i, row, block_tokens).as_dict()}
            ),
            "max_tokens": row.output_length,
        }
        for i, row in enumerate(rows)
    ]


def _prompt(index: int, row: TraceRow, block_tokens: int) -> TracePrompt:
    return TracePrompt(row.hash_ids, row.input_length, block_tokens, index)


def trace_config(rows: Sequence[TraceRow], block_size: int = 16) -> dict[str, Any]:
    """Knobs with room for the trace's longest request: `max_model_len` (prompt and every
    output token) and a KV pool of at least twice that."""
    longest = max(r.input_length + r.output_length for r in rows)
    max_model_len = max(2048, longest)
    return {
        "max_model_len": max_model_len,
        "num_gpu_blocks": max(1024, 2 * -(-max_model_len // block_size) + 1),
    }


def trace_scenario(
    rows: Sequence[TraceRow],
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    name: str = "trace",
    config: dict[str, Any] | None = None,
    tokens: bool = False,
) -> dict[str, Any]:
    """A scenario (engine/scenario.py's format) replaying the trace's arrivals (prompts as
    block chains, or token lists with `tokens`: trace_requests)."""
    span = rows[-1].timestamp - rows[0].timestamp
    return {
        "name": name,
        "description": f"Mooncake trace: {len(rows)} requests over {span / 1000:.3f} s, "
        f"{block_tokens}-token blocks",
        "config": trace_config(rows) if config is None else config,
        "requests": trace_requests(rows, block_tokens, tokens),
    }


class BlockNumbering:
    """Hash ids for prompts, as a trace writes them: block j's key is a hash of block j-1's
    key and block j's tokens; a key's id is its rank of first appearance."""

    def __init__(self, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> None:
        self.block_tokens = block_tokens
        self._ids: dict[bytes, int] = {}

    def ids(self, prompt: Sequence[int]) -> list[int]:
        return self.keyed(block_keys(prompt, self.block_tokens))

    def keyed(self, keys: Iterable[bytes]) -> list[int]:
        """Ids for blocks known by their keys (protocol.blocks: a vLLM node's prompts)."""
        ids = self._ids
        return [ids.setdefault(k, len(ids)) for k in keys]

    def fresh(self, num_tokens: int) -> list[int]:
        """Ids for a prompt whose tokens are not known (all new: nothing known shared)."""
        start = len(self._ids)
        count = -(-num_tokens // self.block_tokens)
        for k in range(count):
            self._ids[b"fresh:%d" % (start + k)] = start + k
        return list(range(start, start + count))


def trace_line(timestamp_ms: float, input_length: int, output_length: int, ids: list[int]) -> str:
    """One JSONL line (newline included); whole milliseconds are written as integers."""
    ts = round(timestamp_ms, 3)
    row = {
        "timestamp": int(ts) if ts == int(ts) else ts,
        "input_length": input_length,
        "output_length": output_length,
        "hash_ids": ids,
    }
    return json.dumps(row, separators=(", ", ": ")) + "\n"


def trace_request(index: int, row: TraceRow, block_tokens: int) -> ScenarioRequest:
    """The trace's request `index` as a scenario request (its prompt a block chain)."""
    return ScenarioRequest(
        f"trace-{index}",
        0,
        _prompt(index, row, block_tokens),
        SamplingParams(max_tokens=row.output_length),
        arrival_time_ms=row.timestamp,
    )
