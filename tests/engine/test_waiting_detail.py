"""The numbers behind "why is it waiting" agree with the decision the scheduler made."""

from __future__ import annotations

from engine.waiting import waiting_text
from tests.engine.helpers import make_request, make_scheduler, reasons, step


def test_kv_gate_reports_blocks_the_head_needed_beyond_the_free_ones() -> None:
    sched = make_scheduler(
        block_size=4, num_gpu_blocks=6, max_num_batched_tokens=64, scheduler_reserve_full_isl=False
    )
    make_request(sched, "a", 12, max_tokens=8)  # 3 blocks now
    step(sched)
    make_request(sched, "b", 10, max_tokens=2)  # needs 3 blocks, 2 are free
    out = step(sched)
    assert reasons(sched, out) == {"b": "kv_blocks"}
    d = out.waiting_detail
    pool = sched.kv_cache_manager.block_pool
    assert d["gate"] == "kv_blocks" and d["head"] == "b"
    assert d["blocks_usable"] == pool.num_usable_blocks == 5
    assert d["blocks_needed"] == 3
    assert d["blocks_needed"] > d["blocks_free"]
    assert d["blocks_used"] + d["blocks_free"] == d["blocks_usable"]
    text = waiting_text("b", "kv_blocks", d)
    assert "needs 3 more blocks" in text and f"{d['blocks_used']} of 5" in text


def test_reserve_full_isl_gate_counts_the_whole_sequence() -> None:
    sched = make_scheduler(block_size=4, num_gpu_blocks=8, max_num_batched_tokens=8)
    make_request(sched, "a", 16, max_tokens=12)
    step(sched)
    step(sched)  # a holds 4 blocks; its decode this step takes a 5th
    make_request(sched, "b", 16, max_tokens=1)  # whole sequence: 4 blocks, 2 free
    out = step(sched)
    assert reasons(sched, out)["b"] == "kv_blocks"
    d = out.waiting_detail
    assert d["full_sequence"] is True
    assert d["blocks_needed"] == 4 and d["blocks_free"] == 2


def test_token_budget_detail_adds_up_to_the_plan() -> None:
    sched = make_scheduler(max_num_batched_tokens=16, max_num_seqs=8, num_gpu_blocks=100)
    for i in range(3):
        make_request(sched, f"d{i}", 2, max_tokens=20)
    step(sched)  # three prompts in one step; they decode from now on
    make_request(sched, "long", 40, max_tokens=2)
    make_request(sched, "late", 4, max_tokens=2)
    out = step(sched)
    assert reasons(sched, out) == {"late": "token_budget"}
    d = out.waiting_detail
    assert d["budget_used"] == out.total_num_scheduled_tokens == d["budget_max"] == 16
    assert d["num_decodes"] == 3 and d["decode_tokens"] == 3
    assert d["largest_chunk_req"] == "long" and d["largest_chunk_tokens"] == 13
    assert d["decode_tokens"] + d["prefill_tokens"] == d["budget_used"]
    assert waiting_text("late", "token_budget", d) == (
        "waits: token budget used (16/16: 3 decodes + long prefill chunk 13)"
    )


def test_max_num_seqs_and_policy_order() -> None:
    sched = make_scheduler(max_num_seqs=1, max_num_batched_tokens=64, num_gpu_blocks=100)
    make_request(sched, "a", 4, max_tokens=5)
    make_request(sched, "b", 4, max_tokens=5)
    out = step(sched)
    d = out.waiting_detail
    assert reasons(sched, out) == {"b": "max_num_seqs"}
    assert d["max_num_seqs"] == 1 and d["num_running"] == 1
    assert waiting_text("b", "max_num_seqs", d) == "waits: max_num_seqs 1 reached"
    assert waiting_text("c", "policy_order", {"head": "b", "policy": "fcfs"}) == (
        "behind b in FCFS order"
    )
