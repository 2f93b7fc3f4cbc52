"""Budget, sequence slots, admission order and gates of schedule()."""

from __future__ import annotations

import pytest

from engine.config import ConfigError
from engine.waiting_reasons import KV_BLOCKS, MAX_NUM_SEQS, NO_CHUNKING_FIT, POLICY_ORDER
from tests.engine.helpers import (
    check_invariants,
    make_config,
    make_request,
    make_scheduler,
    reasons,
    scheduled,
    step,
)


def test_running_requests_go_first_and_budget_is_shared() -> None:
    s = make_scheduler(max_num_batched_tokens=10)
    make_request(s, "A", 6)
    make_request(s, "B", 6)
    assert scheduled(step(s)) == {"A": 6, "B": 4}
    # A sampled its first token and now needs 1; B is RUNNING with 2 prompt tokens left.
    assert scheduled(step(s)) == {"A": 1, "B": 2}
    check_invariants(s)


def test_max_num_seqs_holds_back_admissions() -> None:
    s = make_scheduler(max_num_seqs=2)
    for name in "ABC":
        make_request(s, name, 3)
    out = step(s)
    assert scheduled(out) == {"A": 3, "B": 3}
    assert reasons(s, out) == {"C": MAX_NUM_SEQS}
    assert out.num_running == 2 and out.num_waiting == 1


def test_without_chunked_prefill_a_prompt_that_does_not_fit_blocks_the_queue() -> None:
    s = make_scheduler(max_num_batched_tokens=8, max_model_len=8, enable_chunked_prefill=False)
    make_request(s, "A", 6, max_tokens=1)
    make_request(s, "B", 5, max_tokens=1)
    make_request(s, "C", 1, max_tokens=1)  # would fit, but waits behind B (head of line)
    out = step(s)
    assert scheduled(out) == {"A": 6}
    assert reasons(s, out) == {"B": NO_CHUNKING_FIT, "C": POLICY_ORDER}


def test_with_chunked_prefill_the_same_prompt_gets_a_partial_chunk() -> None:
    s = make_scheduler(max_num_batched_tokens=8, max_model_len=8)
    make_request(s, "A", 6, max_tokens=1)
    make_request(s, "B", 5, max_tokens=1)
    out = step(s)
    assert scheduled(out) == {"A": 6, "B": 2}
    chunk_b = out.chunks[1]
    assert chunk_b.is_prefill and not chunk_b.sample


def test_priority_policy_admits_lower_value_first() -> None:
    s = make_scheduler(policy="priority", max_num_seqs=1)
    make_request(s, "low", 3, priority=5)
    make_request(s, "high", 3, priority=0)
    assert scheduled(step(s)) == {"high": 3}


def test_priority_ties_break_by_arrival() -> None:
    s = make_scheduler(policy="priority", max_num_seqs=1)
    make_request(s, "first", 3, priority=1)
    make_request(s, "second", 3, priority=1)
    assert scheduled(step(s)) == {"first": 3}


def test_reserve_full_isl_admits_only_if_the_whole_sequence_fits() -> None:
    # 4 usable blocks of 4 tokens; A's first chunk takes 1 block, leaving 3.
    kwargs = {
        "block_size": 4,
        "num_gpu_blocks": 5,
        "max_num_batched_tokens": 8,
        "long_prefill_token_threshold": 4,
    }
    s = make_scheduler(**kwargs)
    make_request(s, "A", 12, max_tokens=1)
    make_request(s, "B", 16, max_tokens=1)  # needs all 4 blocks for its prompt
    out = step(s)
    assert scheduled(out) == {"A": 4}
    assert reasons(s, out) == {"B": KV_BLOCKS}

    s = make_scheduler(**kwargs, scheduler_reserve_full_isl=False)
    make_request(s, "A", 12, max_tokens=1)
    make_request(s, "B", 16, max_tokens=1)
    assert scheduled(step(s)) == {"A": 4, "B": 4}


def test_kv_progress_advances_at_schedule_time() -> None:
    s = make_scheduler(max_num_batched_tokens=4, max_num_seqs=4)
    a = make_request(s, "A", 10)
    out = s.schedule()
    assert out.chunks[0].num_computed_before == 0
    assert a.num_computed_tokens == 4  # claimed before the forward pass runs


def test_token_budget_never_exceeded_and_paused_schedules_nothing() -> None:
    s = make_scheduler(max_num_batched_tokens=16, max_num_seqs=16)
    for i in range(6):
        make_request(s, f"r{i}", 7)
    for _ in range(10):
        out = step(s)
        assert out.total_num_scheduled_tokens <= 16
        check_invariants(s)
    s.paused = True
    out = s.schedule()
    assert out.chunks == ()
    assert set(reasons(s, out).values()) <= {"paused"}


@pytest.mark.parametrize(
    ("knobs", "field"),
    [
        ({"max_num_batched_tokens": 4, "max_num_seqs": 8}, "max_num_batched_tokens"),
        (
            {"max_num_batched_tokens": 64, "max_model_len": 128, "enable_chunked_prefill": False},
            "max_num_batched_tokens",
        ),
        ({"long_prefill_token_threshold": -1}, "long_prefill_token_threshold"),
        ({"num_gpu_blocks": 1}, "num_gpu_blocks"),
    ],
)
def test_config_validation_names_the_vllm_rule(knobs: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        make_config(**knobs).validate()  # type: ignore[arg-type]
    assert info.value.field == field


def test_requests_that_could_never_run_are_rejected_with_a_reason() -> None:
    s = make_scheduler(max_model_len=32, block_size=4, num_gpu_blocks=100)
    assert "max_model_len" in (s.rejection_reason(32, 1) or "")
    assert s.rejection_reason(31, 1) is None
    s = make_scheduler(max_model_len=32, block_size=4, num_gpu_blocks=5)
    # 4 usable blocks = 16 slots; at its last step a request holds prompt + outputs - 1.
    assert s.rejection_reason(10, 7) is None
    assert "could never finish" in (s.rejection_reason(10, 8) or "")
