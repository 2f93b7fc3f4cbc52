"""Prompt-lookup n-gram drafting: vLLM's `ngram` speculative method, stdlib only.

Semantics follow vLLM 0.20's `NgramProposer` (vllm/v1/spec_decode/ngram_proposer.py);
tests/runner/test_ngram.py checks them against that file's own matcher when a vLLM venv
is present:

- The context is every token of the request (prompt and outputs, drafts excluded).
- No drafts if the context is shorter than `min_n`; the number of drafts is capped at
  `max_model_len - len(context)` (none once the context reaches `max_model_len`).
- The longest n in [min_n, max_n] whose last n tokens occur earlier in the context wins.
  Among the occurrences of that n-gram the EARLIEST one is used (vLLM scans the reversed
  context and keeps the last position it sees). An occurrence may overlap the suffix it
  matches (`a a a`: the suffix `a a` matches at 0 and proposes `a`).
- The drafts are the up-to-k tokens that follow the occurrence. A match close to the end
  proposes fewer than k (never padded); every match has at least one follower.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence


def _find(data: bytes, pattern: bytes, start: int, end: int, item: int) -> int:
    """Index of the first occurrence of `pattern` on the `item`-byte grid of
    data[start:end] (bytes.find hits off the grid are skipped), or -1."""
    pos = data.find(pattern, start, end)
    while pos > 0 and pos % item:
        pos = data.find(pattern, pos + 1, end)
    return pos // item if pos >= 0 else -1


def ngram_drafts(
    token_ids: Sequence[int], k: int, min_n: int, max_n: int, max_model_len: int
) -> list[int]:
    """Up to `k` drafts for one request whose context is `token_ids`."""
    num_tokens = len(token_ids)
    k = min(k, max_model_len - num_tokens)
    max_n = min(max_n, num_tokens - 1)
    if k <= 0 or max_n < min_n:
        return []
    # NOTE: a byte search over fixed-width ids keeps the scans in C (bytes.find); that and
    # probing min_n first (no match there: no match at all) is what makes 256 requests x
    # a few thousand tokens per step cheap in pure Python.
    try:
        ids = array("i", token_ids)
    except OverflowError:
        ids = array("q", token_ids)
    data = ids.tobytes()
    item = ids.itemsize
    # An occurrence must end before the last token, so that it has a follower.
    end = (num_tokens - 1) * item
    first = _find(data, data[(num_tokens - min_n) * item :], 0, end, item)
    if first < 0:
        return []
    match, n_found = first, min_n
    for n in range(max_n, min_n, -1):
        # An n-gram at s contains the min_n-gram at s + n - min_n, so s >= first - n + min_n.
        start = max(0, first - n + min_n) * item
        pos = _find(data, data[(num_tokens - n) * item :], start, end, item)
        if pos >= 0:
            match, n_found = pos, n
            break
    begin = match + n_found
    return list(token_ids[begin : begin + k])


class NgramProposer:
    """The drafter a runner keeps: n-gram bounds and the model length, from the config."""

    __slots__ = ("max_model_len", "max_n", "min_n")

    def __init__(self, min_n: int, max_n: int, max_model_len: int) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n ({min_n}) <= max_n ({max_n})")
        self.min_n = min_n
        self.max_n = max_n
        self.max_model_len = max_model_len

    def propose(
        self, requests: Sequence[tuple[str, Sequence[int]]], num_spec_tokens: int
    ) -> list[list[int]]:
        """One list of drafts per (req_id, token_ids), in order (empty: no match)."""
        if num_spec_tokens <= 0:
            return [[] for _ in requests]
        min_n, max_n, max_len = self.min_n, self.max_n, self.max_model_len
        return [
            ngram_drafts(token_ids, num_spec_tokens, min_n, max_n, max_len)
            for _, token_ids in requests
        ]
