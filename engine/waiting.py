"""Why waiting requests waited this step, with the numbers the scheduler decided on.

The reason codes (`protocol.codes.WaitingReason`) say which gate held the queue; the detail says
by how much, computed when the gate closed: e.g. the blocks the head of the queue needed
against the free blocks, or how the token budget was spent. `waiting_text` turns a code
and the step's detail into the sentence the dashboard shows (static/js mirrors it).
"""

from __future__ import annotations

from collections.abc import Mapping
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


def waiting_text(req_id: str, reason: str, detail: Mapping[str, Any] | None) -> str:
    """One sentence: why `req_id` waits at this step, with numbers when there are any."""
    d = detail or {}
    head = d.get("head")
    if reason == WaitingReason.POLICY_ORDER and head:
        order = "priority" if d.get("policy") == "priority" else "FCFS"
        return f"behind {head} in {order} order"
    if reason == WaitingReason.KV_BLOCKS:
        used, usable = d.get("blocks_used"), d.get("blocks_usable")
        what = "its whole sequence" if d.get("full_sequence") else "this chunk"
        return (
            f"waits: KV pool full ({used} of {usable} usable blocks used, "
            f"{d.get('blocks_free')} free); {req_id} needs {d.get('blocks_needed')} more "
            f"blocks for {what}"
        )
    if reason == WaitingReason.TOKEN_BUDGET and "padded_tokens" in d:
        return (
            f"waits: a new decode is padded to {d['padded_tokens']} tokens (speculative "
            f"decoding) and only {d.get('budget_left')} are left in the budget"
        )
    if reason == WaitingReason.TOKEN_BUDGET and "budget_max" in d:
        parts = []
        if d.get("num_decodes"):
            parts.append(f"{d['num_decodes']} decode{'s' if d['num_decodes'] != 1 else ''}")
        if d.get("largest_chunk_req"):
            more = d["num_prefill_chunks"] - 1
            extra = f" + {more} more prefill chunk{'s' if more != 1 else ''}" if more else ""
            parts.append(
                f"{d['largest_chunk_req']} prefill chunk {d['largest_chunk_tokens']}{extra}"
            )
        spent = " + ".join(parts) or "nothing"
        return f"waits: token budget used ({d['budget_used']}/{d['budget_max']}: {spent})"
    if reason == WaitingReason.MAX_NUM_SEQS:
        return f"waits: max_num_seqs {d.get('max_num_seqs', '?')} reached"
    if reason == WaitingReason.MAX_NUM_ACTIVE_SEQS:
        return (
            f"waits: admission cap max_num_active_seqs {d.get('max_num_active_seqs', '?')} "
            f"reached ({d.get('num_running', '?')} running; max_num_seqs "
            f"{d.get('max_num_seqs', '?')})"
        )
    if reason == WaitingReason.KV_WATERMARK:
        return (
            f"waits: KV watermark ({d.get('blocks_free')} blocks free, "
            f"{d.get('watermark_blocks')} kept free); {req_id} needs "
            f"{d.get('blocks_needed')} blocks"
        )
    if reason == WaitingReason.PREFILL_THROTTLED:
        if d.get("throttled_by_coordinator"):
            return "waits: prefill deferred on this step (data-parallel cadence)"
        return (
            f"waits: prefill throttled until step {d.get('until_step')} "
            f"(prefill_schedule_interval {d.get('prefill_schedule_interval')})"
        )
    if reason == WaitingReason.CACHE_AWARE_ORDER:
        return (
            f"behind {d.get('cache_aware_ahead')}, moved ahead by cache-aware admission: "
            f"{d.get('cache_aware_cached_tokens')} tokens of its prompt are cached "
            f"(cache_aware_admission_window {d.get('cache_aware_window')})"
        )
    if reason == WaitingReason.NO_CHUNKING_FIT:
        return (
            f"waits: chunked prefill is off and {req_id}'s {d.get('tokens_needed')} tokens do "
            f"not fit the {d.get('budget_left')} left in the budget"
        )
    if reason == WaitingReason.PREEMPTION_THIS_STEP:
        return f"waits: {d.get('num_preempted', 'a')} request(s) were preempted this step"
    if reason == WaitingReason.STATIC_BATCH:
        return (
            f"waits: static batching admits a new batch only when the current one "
            f"({d.get('batch_size', '?')} rows) has finished"
        )
    if reason == WaitingReason.PAUSED:
        return "waits: the engine is paused"
    if reason in GATE_TEXTS:
        return GATE_TEXTS[reason]
    return f"waits: {reason}"


GATE_TEXTS: dict[str, str] = {
    WaitingReason.REMOTE_KV: "waits: its KV cache is still being received from a remote prefill",
    WaitingReason.STRUCTURED_OUTPUT: (
        "waits: its structured-output grammar is still being compiled"
    ),
    WaitingReason.STREAMING_INPUT: "waits: more of its streamed prompt has to arrive",
    WaitingReason.LORA_LIMIT: "waits: its LoRA adapter would exceed max_loras this step",
    WaitingReason.OUTPUT_IN_FLIGHT: ("waits: output from before its preemption is still in flight"),
}
"""The gates only a vLLM node has (its adapter reports them; no numbers)."""
