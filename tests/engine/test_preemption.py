"""KV pressure: victim choice per policy, rollback, recompute, no admissions that step."""

from __future__ import annotations

from engine.request import RequestStatus
from engine.waiting_reasons import PREEMPTION_THIS_STEP
from tests.engine.helpers import (
    check_invariants,
    make_request,
    make_scheduler,
    reasons,
    scheduled,
    step,
)

# 3 usable blocks of 4 tokens. Y (prompt 2) and X (prompt 8) fill all three at step 0.
# At step 1 Y's decode fits its block, X's decode needs a third block: the pool is short.
POOL = {"block_size": 4, "num_gpu_blocks": 4, "max_num_batched_tokens": 32}


def _pressure(policy: str):  # type: ignore[no-untyped-def]
    s = make_scheduler(policy=policy, **POOL)
    y = make_request(s, "Y", 2, max_tokens=4, priority=9)
    x = make_request(s, "X", 8, max_tokens=4, priority=0)
    assert scheduled(step(s)) == {"Y": 2, "X": 8}
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == 0
    return s, x, y


def test_fcfs_preempts_the_last_running_request_even_if_it_is_the_one_asking() -> None:
    s, x, _y = _pressure("fcfs")
    make_request(s, "Z", 1, max_tokens=1)  # would fit once X's blocks are freed
    out = step(s)
    assert scheduled(out) == {"Y": 1}
    assert out.preempted_req_ids == ("X",)
    assert out.preempted_tokens_lost == (8,)
    assert x.status == RequestStatus.PREEMPTED and x.num_computed_tokens == 0
    assert x.num_preemptions == 1
    # Nothing waiting is admitted in a step that preempted; X went to the front.
    assert [r.request_id for r in s.waiting] == ["X", "Z"]
    assert reasons(s, out) == {"X": PREEMPTION_THIS_STEP, "Z": PREEMPTION_THIS_STEP}
    check_invariants(s)


def test_priority_preempts_the_lowest_priority_and_rolls_back_its_planned_tokens() -> None:
    s, x, y = _pressure("priority")
    out = step(s)
    # Y (priority 9) was already scheduled this step when X ran short: its 1 token is
    # rolled back, its blocks freed, and X takes one of them.
    assert scheduled(out) == {"X": 1}
    assert out.preempted_req_ids == ("Y",)
    assert out.total_num_scheduled_tokens == 1
    assert y.status == RequestStatus.PREEMPTED and y.num_computed_tokens == 0
    assert x.num_computed_tokens == 9
    check_invariants(s)


def test_recompute_after_preemption_conserves_tokens_and_finishes_everyone() -> None:
    s, x, y = _pressure("fcfs")
    totals: dict[str, int] = {}
    lost = 0
    for _ in range(40):
        out = step(s)
        lost += sum(out.preempted_tokens_lost)
        for c in out.chunks:
            totals[c.req_id] = totals.get(c.req_id, 0) + c.num_tokens
        check_invariants(s)
        if not s.has_unfinished_requests():
            break
    assert not s.has_unfinished_requests()
    assert x.num_output_tokens == 4 and y.num_output_tokens == 4
    # Step 0 gave Y 2 and X 8; afterwards: P + G - 1 for each, plus what was recomputed.
    assert totals["Y"] + 2 == 2 + 4 - 1
    assert totals["X"] + 8 == 8 + 4 - 1 + lost


def test_a_waiting_request_never_preempts_a_running_one() -> None:
    s = make_scheduler(block_size=4, num_gpu_blocks=3, max_num_batched_tokens=32)
    make_request(s, "A", 7, max_tokens=2)  # takes both usable blocks
    step(s)
    make_request(s, "B", 4, max_tokens=1)
    out = step(s)
    assert scheduled(out) == {"A": 1}
    assert out.preempted_req_ids == ()
    assert reasons(s, out) == {"B": "kv_blocks"}
