"""Why each waiting request of a vLLM node waited at a step, with the numbers behind it.

Runs on the sender thread. The schedule hook captured, right after vLLM's schedule()
returned, copies of the waiting queues (references, copied at C speed) and a few scalars
(`Capture`); this replays the decision vLLM's waiting loop took over them, in its order:

* a request in a blocked status is skipped by vLLM (its own code: `structured_output`,
  `remote_kv`, `streaming_input`), as is one whose LoRA would exceed `max_loras`
  (`lora_limit`) or whose output from before its preemption is still in flight
  (`output_in_flight`);
* a preemption this step, or a pause, keeps the loop from running (`preemption_this_step`,
  `paused`);
* else the first request left (the head) met the gate that stopped the loop: the token
  budget (`token_budget`), the sequence limit (`max_num_seqs`, or `max_num_active_seqs`
  below it), a held prefill (`prefill_throttled`: prefill_schedule_interval or DP prefill
  balancing), a prompt that does not fit with chunked prefill off (`no_chunking_fit`), or
  KV blocks (`kv_blocks`, the full-ISL reserve included; `kv_watermark` when the blocks
  were there but the watermark keeps them free); the requests behind a head-only gate wait
  in `policy_order`, behind a queue-wide one for the same gate.

The codes are protocol.codes.WaitingReason, as our engine's; the detail keys are our
engine's (engine/waiting_reasons.py, engine/waiting.py;
tests/vllm check they agree); the numbers of the KV gate leave out prefix-cache hits
(vLLM looks them up only as it admits), so `blocks_needed` is an upper bound.
O(LISTED) per step on this thread for an FCFS queue, whose front (compat.SNAPSHOT_MAX =
LISTED requests) the hook copies; a priority queue's heap is copied whole (a memory copy)
and only its LISTED first are picked here (O(waiting) comparisons, never a full sort). The
first LISTED requests in queue order get a reason, the rest are counted per reason
(`unlisted_<code>` in the detail: those beyond the first LISTED under the queue's gate).
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass
from typing import Any

from protocol.codes import (
    HEAD_GATES,
    KV_BLOCKS,
    KV_WATERMARK,
    LORA_LIMIT,
    MAX_NUM_ACTIVE_SEQS,
    MAX_NUM_SEQS,
    NO_CHUNKING_FIT,
    OUTPUT_IN_FLIGHT,
    PAUSED,
    POLICY_ORDER,
    PREEMPTION_THIS_STEP,
    PREFILL_THROTTLED,
    REMOTE_KV,
    STREAMING_INPUT,
    STRUCTURED_OUTPUT,
    TOKEN_BUDGET,
)

GATE_STATUSES = {
    "WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR": STRUCTURED_OUTPUT,
    "WAITING_FOR_FSM": STRUCTURED_OUTPUT,
    "WAITING_FOR_REMOTE_KVS": REMOTE_KV,
    "WAITING_FOR_STREAMING_REQ": STREAMING_INPUT,
}
"""vLLM's blocked waiting statuses (RequestStatus names) and their codes."""
LISTED = 256


@dataclass(slots=True)
class Capture:
    """What the schedule hook took for the waiting reasons (cheap: copies and ints)."""

    first: Any
    """The queue vLLM drains first (kv_holding_waiting / skipped_waiting), as copied."""
    waiting: Any
    total: int
    """Requests waiting in both queues (the copies may hold only their fronts)."""
    pause: int
    streaming: int
    """Requests waiting for streamed input: they hold a running slot (0.25+)."""
    loras: frozenset[int] | None
    """LoRA ids of the running requests (None without LoRA)."""
    throttled: bool
    """Prefills were to be held this step (before schedule: cadence or DP throttle)."""
    cadence: tuple[int, int]
    """(prefill_schedule_interval, executed steps this one included before prefill is
    allowed again: 0 when only the DP throttle held it)."""
    step: int
    """The step's index (as the frames number steps)."""
    heads: dict[int, tuple[Any, int, int]]
    """id(request) -> (status, num_tokens, num_computed_tokens) of the queues' fronts."""


@dataclass(slots=True)
class Limits:
    """The scheduler's fixed knobs (read once at start)."""

    max_tokens: int
    max_batched: int
    block_size: int
    usable_blocks: int
    max_model_len: int
    chunked: bool
    threshold: int
    reserve_full_isl: bool
    lookahead: int
    num_spec: int
    policy: str
    lay: Any
    """compat.Layout."""


@dataclass(slots=True)
class StepFacts:
    """The step as the schedule hook and the rows saw it."""

    used: int
    num_scheduled: int
    running: int
    free: int
    num_preempted: int
    num_decodes: int
    decode_tokens: int
    prefill_chunks: int
    prefill_tokens: int
    largest: tuple[str, int] | None


def ordered(cap: Capture, lim: Limits) -> list[Any]:
    """The waiting requests in the order vLLM's loop visits them."""
    first, waiting = cap.first, cap.waiting
    if lim.lay.sort:  # raw heaps: only their LISTED first in policy order are looked at
        first, waiting = heapq.nsmallest(LISTED, first), heapq.nsmallest(LISTED, waiting)
        if lim.lay.merge:
            return list(heapq.merge(first, waiting))
    return [*first, *waiting]


def reasons(cap: Capture, lim: Limits, facts: StepFacts) -> tuple[dict[str, str], dict[str, Any]]:
    """(waiting_reasons for the first LISTED requests, waiting_detail) of one step."""
    queue = ordered(cap, lim)
    if not queue:
        return {}, {}
    lay = lim.lay
    statuses = lay.statuses
    pause_new, pause_all = lay.pause_values
    first_ids = {id(r) for r in cap.first} if cap.pause == pause_new else set()
    out: dict[str, str] = {}
    unlisted: Counter[str] = Counter()
    gate: str | None = None
    detail: dict[str, Any] = {}
    heads = cap.heads
    step: tuple[str, str] | None = None  # (gate, head) of the queue, past the own gates
    for i, req in enumerate(queue):
        front = heads.get(id(req))
        code = statuses.get(front[0] if front else req.status) or _own_gate(req, cap, lay)
        if code is None:
            if cap.pause == pause_all or (cap.pause == pause_new and id(req) not in first_ids):
                code = PAUSED
            elif facts.num_preempted:
                code = PREEMPTION_THIS_STEP
            elif gate is None:
                gate, detail = _head_gate(req, cap, lim, facts)
                code = gate
            else:
                code = POLICY_ORDER if gate in HEAD_GATES else gate
            step = step or (code, req.request_id)
        if i < LISTED:
            out[req.request_id] = code
        else:
            unlisted[code] += 1
    if gate is None:  # a queue-wide gate (or only requests with gates of their own)
        gate, head = step or (next(iter(out.values())), queue[0].request_id)
        detail = {**_queue_gate_detail(gate, facts), "head": head}
    rest = cap.total - len(queue)  # beyond the copied front: behind it, at the queue's gate
    if rest > 0:
        unlisted[POLICY_ORDER if gate in HEAD_GATES else gate] += rest
    detail = {"gate": gate, "policy": lim.policy, **detail}
    if unlisted:
        detail["num_waiting"] = cap.total
        detail.update({f"unlisted_{code}": n for code, n in sorted(unlisted.items())})
    return out, detail


def _own_gate(req: Any, cap: Capture, lay: Any) -> str | None:
    """A reason vLLM skips this request for, whatever the rest of the queue does."""
    if lay.stale_output and req.num_stale_output_tokens and not req.drop_stale_output:
        return OUTPUT_IN_FLIGHT
    lora = req.lora_request
    if lora is not None and cap.loras is not None and lay.lora_max:
        lid = lora.lora_int_id
        if lid not in cap.loras and len(cap.loras) >= lay.lora_max:
            return LORA_LIMIT
    return None


def _queue_gate_detail(gate: str, facts: StepFacts) -> dict[str, Any]:
    if gate == PREEMPTION_THIS_STEP:
        return {"num_preempted": facts.num_preempted}
    return {}


def _head_gate(req: Any, cap: Capture, lim: Limits, facts: StepFacts) -> tuple[str, dict[str, Any]]:
    """The gate the head of the queue met, and its numbers (engine.waiting's keys)."""
    lay = lim.lay
    head: dict[str, Any] = {"head": req.request_id}
    status, num_tokens, computed = cap.heads.get(id(req)) or (
        req.status,
        req.num_tokens,
        req.num_computed_tokens,
    )
    budget_left = max(lim.max_tokens - facts.used, 0)
    input_left = lim.max_batched - facts.used - lay.draft_slots * facts.num_scheduled
    if budget_left <= 0 or (lay.draft_slots and input_left <= lay.draft_slots):
        return TOKEN_BUDGET, {**head, **_budget_detail(lim, facts)}
    slots = facts.running + cap.streaming
    if slots >= lay.active_limit:
        if lay.active_attr and lay.active_limit < lay.max_num_seqs:
            return MAX_NUM_ACTIVE_SEQS, {
                **head,
                "max_num_active_seqs": lay.active_limit,
                "max_num_seqs": lay.max_num_seqs,
                "num_running": slots,
            }
        return MAX_NUM_SEQS, {**head, "max_num_seqs": lay.max_num_seqs, "num_running": slots}
    if cap.throttled and facts.num_decodes and computed < num_tokens - 1:
        interval, held = cap.cadence
        return PREFILL_THROTTLED, {
            **head,
            "prefill_schedule_interval": interval,
            "steps_held": held,
            "until_step": cap.step + held,
            "throttled_by_coordinator": not held,
        }
    tokens = num_tokens - computed
    if 0 < lim.threshold < tokens:
        tokens = lim.threshold
    room = min(budget_left, input_left - lay.draft_slots) if lay.draft_slots else budget_left
    if not lim.chunked and tokens > room:
        return NO_CHUNKING_FIT, {**head, "tokens_needed": tokens, "budget_left": room}
    if lim.num_spec and tokens == 1 and room < 1 + lim.num_spec:
        # A new decode is padded to 1 + drafts (0.25+): it did not fit what was left.
        padded = {"padded_tokens": 1 + lim.num_spec, "budget_left": room}
        return TOKEN_BUDGET, {**head, **_budget_detail(lim, facts), **padded}
    detail = _kv_detail(status, num_tokens, computed, tokens, room, lim, facts)
    gate = KV_WATERMARK if detail.pop("_watermark_only") else KV_BLOCKS
    return gate, {**head, **detail}


def _kv_detail(
    status: Any,
    num_tokens: int,
    computed: int,
    tokens: int,
    room: int,
    lim: Limits,
    facts: StepFacts,
) -> dict[str, Any]:
    bs = lim.block_size
    held = -(-computed // bs)
    chunk = min(tokens, room)
    need = -(-min(computed + chunk + lim.lookahead, lim.max_model_len) // bs) - held
    # vLLM applies the watermark to waiting or preempted requests when others are running.
    watermark = lim.lay.watermark_blocks if facts.running else 0
    if status not in lim.lay.admit_statuses:
        watermark = 0
    full = False
    if lim.reserve_full_isl:
        whole = -(-min(num_tokens, lim.max_model_len) // bs) - held
        if whole + watermark > facts.free:
            full, need = True, whole
    out: dict[str, Any] = {
        "blocks_needed": need,
        "blocks_free": facts.free,
        "blocks_used": lim.usable_blocks - facts.free,
        "blocks_usable": lim.usable_blocks,
        "full_sequence": full,
        # The blocks were there: only the watermark kept them free.
        "_watermark_only": bool(watermark) and need <= facts.free,
    }
    if watermark:
        out["watermark_blocks"] = watermark
    return out


def _budget_detail(lim: Limits, facts: StepFacts) -> dict[str, Any]:
    """How the token budget was spent (engine.waiting.token_budget_detail's keys)."""
    out: dict[str, Any] = {
        "budget_used": facts.used,
        "budget_max": lim.max_tokens,
        "num_decodes": facts.num_decodes,
        "decode_tokens": facts.decode_tokens,
        "num_prefill_chunks": facts.prefill_chunks,
        "prefill_tokens": facts.prefill_tokens,
    }
    if facts.largest is not None:
        out["largest_chunk_req"], out["largest_chunk_tokens"] = facts.largest
    return out
