"""Why waiting requests waited this step, with the numbers the scheduler decided on.

The reason codes (`protocol.codes.WaitingReason`) say which gate held the queue; the detail says
by how much, computed when the gate closed: e.g. the blocks the head of the queue needed
against the free blocks, or how the token budget was spent. `waiting_text` turns a code
and the step's detail into the sentence the dashboard shows.

Every sentence is data, here and only here: WAITING_SENTENCES. tools/gen_protocol_js.py
copies the table into static/js/protocol.js, and static/js/waiting.js reads it the way
`waiting_text` does, so the page words a reason exactly as the JSON twins do. A sentence's
placeholders (`x`: a key of the detail, `req` the request, `reason` the code; `x-1`: its
value less one):
- `{x}`: x's value, `None` when the detail lacks it (or it is null);
- `{x|text}`: x's value, `text` when the detail lacks it;
- `{x?yes/no}`: `yes` when x is set (not missing, 0, false or empty), else `no`;
- `{x=v?yes/no}`: `yes` when x's value is `v`, else `no`;
- `{x:s}`: `s` unless x is 1 (a plural);
- `{parts}`: the sentence's `parts` whose `when` holds, joined by PARTS_JOINER, or NO_PARTS.
A reason's sentences are tried in order; the first whose `when` terms are all set is said.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from protocol.codes import WaitingReason
from protocol.wire import WaitingDetail


def token_budget_detail(
    budget_max: int, budget_left: int, chunks: dict[str, int], decodes: set[str]
) -> WaitingDetail:
    """How the step's token budget was spent: decodes and the largest prefill chunk."""
    num_decodes = sum(1 for r in chunks if r in decodes)
    decode_tokens = sum(n for r, n in chunks.items() if r in decodes)
    prefill = {r: n for r, n in chunks.items() if r not in decodes}
    detail: WaitingDetail = {
        "gate": WaitingReason.TOKEN_BUDGET,
        "budget_used": budget_max - budget_left,
        "budget_max": budget_max,
        "num_decodes": num_decodes,
        "decode_tokens": decode_tokens,
        "num_prefill_chunks": len(prefill),
        "prefill_tokens": sum(prefill.values()),
    }
    if prefill:
        req, n = max(prefill.items(), key=lambda kv: kv[1])
        detail["largest_chunk_req"] = req
        detail["largest_chunk_tokens"] = n
    return detail


@dataclass(frozen=True, slots=True)
class Sentence:
    """One wording of a waiting reason."""

    text: str
    """The words, with placeholders (the module's docstring)."""
    when: tuple[str, ...] = ()
    """Terms that must all be set for this wording to be the one said."""
    parts: tuple[Sentence, ...] = ()
    """The phrases `{parts}` lists (those whose own `when` holds)."""


PARTS_JOINER = " + "
NO_PARTS = "nothing"

WAITING_SENTENCES: dict[str, tuple[Sentence, ...]] = {
    WaitingReason.POLICY_ORDER: (
        Sentence("behind {head} in {policy=priority?priority/FCFS} order", when=("head",)),
    ),
    WaitingReason.KV_BLOCKS: (
        Sentence(
            "waits: KV pool full ({blocks_used} of {blocks_usable} usable blocks used, "
            "{blocks_free} free); {req} needs {blocks_needed} more blocks for "
            "{full_sequence?its whole sequence/this chunk}"
        ),
    ),
    WaitingReason.TOKEN_BUDGET: (
        Sentence(
            "waits: a new decode is padded to {padded_tokens} tokens (speculative decoding) "
            "and only {budget_left} are left in the budget",
            when=("padded_tokens",),
        ),
        Sentence(
            "waits: token budget used ({budget_used}/{budget_max}: {parts})",
            when=("budget_max",),
            parts=(
                Sentence("{num_decodes} decode{num_decodes:s}", when=("num_decodes",)),
                Sentence(
                    "{largest_chunk_req} prefill chunk {largest_chunk_tokens}",
                    when=("largest_chunk_req",),
                ),
                Sentence(
                    "{num_prefill_chunks-1} more prefill chunk{num_prefill_chunks-1:s}",
                    when=("largest_chunk_req", "num_prefill_chunks-1"),
                ),
            ),
        ),
    ),
    WaitingReason.MAX_NUM_SEQS: (Sentence("waits: max_num_seqs {max_num_seqs|?} reached"),),
    WaitingReason.MAX_NUM_ACTIVE_SEQS: (
        Sentence(
            "waits: admission cap max_num_active_seqs {max_num_active_seqs|?} reached "
            "({num_running|?} running; max_num_seqs {max_num_seqs|?})"
        ),
    ),
    WaitingReason.KV_WATERMARK: (
        Sentence(
            "waits: KV watermark ({blocks_free} blocks free, {watermark_blocks} kept free); "
            "{req} needs {blocks_needed} blocks"
        ),
    ),
    WaitingReason.PREFILL_THROTTLED: (
        Sentence(
            "waits: prefill deferred on this step (data-parallel cadence)",
            when=("throttled_by_coordinator",),
        ),
        Sentence(
            "waits: prefill throttled until step {until_step} "
            "(prefill_schedule_interval {prefill_schedule_interval})"
        ),
    ),
    WaitingReason.CACHE_AWARE_ORDER: (
        Sentence(
            "behind {cache_aware_ahead}, moved ahead by cache-aware admission: "
            "{cache_aware_cached_tokens} tokens of its prompt are cached "
            "(cache_aware_admission_window {cache_aware_window})"
        ),
    ),
    WaitingReason.NO_CHUNKING_FIT: (
        Sentence(
            "waits: chunked prefill is off and {req}'s {tokens_needed} tokens do not fit the "
            "{budget_left} left in the budget"
        ),
    ),
    WaitingReason.PREEMPTION_THIS_STEP: (
        Sentence("waits: {num_preempted|a} request(s) were preempted this step"),
    ),
    WaitingReason.STATIC_BATCH: (
        Sentence(
            "waits: static batching admits a new batch only when the current one "
            "({batch_size|?} rows) has finished"
        ),
    ),
    WaitingReason.PAUSED: (Sentence("waits: the engine is paused"),),
    # The gates only a vLLM node has (its adapter reports them; no numbers).
    WaitingReason.REMOTE_KV: (
        Sentence("waits: its KV cache is still being received from a remote prefill"),
    ),
    WaitingReason.STRUCTURED_OUTPUT: (
        Sentence("waits: its structured-output grammar is still being compiled"),
    ),
    WaitingReason.STREAMING_INPUT: (Sentence("waits: more of its streamed prompt has to arrive"),),
    WaitingReason.LORA_LIMIT: (
        Sentence("waits: its LoRA adapter would exceed max_loras this step"),
    ),
    WaitingReason.OUTPUT_IN_FLIGHT: (
        Sentence("waits: output from before its preemption is still in flight"),
    ),
}
"""Each reason's wordings, in the order they are tried."""

FALLBACK = Sentence("waits: {reason}")
"""A reason without a wording of its own, or none of whose wordings holds."""


def waiting_text(req_id: str, reason: str, detail: Mapping[str, Any] | None) -> str:
    """One sentence: why `req_id` waits at this step, with numbers when there are any."""
    values = {**(detail or {}), "req": req_id, "reason": reason}
    for sentence in WAITING_SENTENCES.get(reason, ()):
        if _holds(sentence, values):
            return _say(sentence, values)
    return _say(FALLBACK, values)


_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
Words = Callable[[Sentence, Mapping[str, Any]], str]
"""A placeholder, read once: the words it stands for in a sentence, given the values."""


def _holds(sentence: Sentence, values: Mapping[str, Any]) -> bool:
    return all(get(values) for get in _terms(sentence.when))


@functools.cache
def _terms(terms: tuple[str, ...]) -> tuple[Callable[[Mapping[str, Any]], Any], ...]:
    return tuple(_term(t) for t in terms)


def _term(term: str) -> Callable[[Mapping[str, Any]], Any]:
    """A term's value, read once: `x` or `x-N` (x less N); None when x is missing."""
    name, _, less = term.partition("-")
    if not less:
        return lambda values: values.get(name)
    n = int(less)
    return lambda values: None if values.get(name) is None else values[name] - n


def _say(sentence: Sentence, values: Mapping[str, Any]) -> str:
    first, rest = _read(sentence.text)
    return first + "".join([words(sentence, values) + after for words, after in rest])


@functools.cache
def _read(text: str) -> tuple[str, tuple[tuple[Words, str], ...]]:
    """`text` read once: its first literal words, then each placeholder with the literal
    words after it."""
    pieces = _PLACEHOLDER.split(text)  # literal, body, literal, ..., literal
    rest = zip(pieces[1::2], pieces[2::2], strict=True)
    return pieces[0], tuple((_placeholder(body), after) for body, after in rest)


def _placeholder(body: str) -> Words:
    """The words of one placeholder (its `body`, between the braces)."""
    if body == "parts":
        return _parts
    if body.endswith(":s"):
        count = _term(body[:-2])
        return lambda _, values: "" if count(values) == 1 else "s"
    term, has_default, default = body.partition("|")
    if not has_default:
        default = "None"
    test, is_choice, choice = term.partition("?")
    if is_choice:
        yes, _, no = choice.partition("/")
        name, is_equal, want = test.partition("=")
        test_value = _term(name)
        if is_equal:
            return lambda _, values: yes if _text(test_value(values), "") == want else no
        return lambda _, values: yes if test_value(values) else no
    value = _term(term)
    return lambda _, values: _text(value(values), default)


def _text(value: Any, default: str) -> str:
    return default if value is None else str(value)


def _parts(sentence: Sentence, values: Mapping[str, Any]) -> str:
    said = [_say(p, values) for p in sentence.parts if _holds(p, values)]
    return PARTS_JOINER.join(said) or NO_PARTS
