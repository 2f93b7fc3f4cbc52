"""Which steps a request's life reads from frames, and reasons from the steps' numbers."""

from __future__ import annotations

from typing import Any

from app.records.life_plan import ReadPlan, frame_ranges, plan_reads, reason_at


def marks(*kinds: tuple[str, int]) -> list[dict[str, Any]]:
    return [{"kind": k, "step": s} for k, s in kinds]


def test_runs_and_waits_from_the_marks() -> None:
    life = marks(("arrived", 3), ("scheduled", 7), ("first_token", 8), ("preempted", 20),
                 ("resumed", 31), ("finished", 40))  # fmt: skip
    plan = plan_reads(life, 3, 40)
    assert plan == ReadPlan(running=[(7, 20), (31, 40)], waiting=[(3, 6), (20, 30)])
    # Admitted at arrival: no wait; still going at the end of the range.
    assert plan_reads(marks(("arrived", 5), ("scheduled", 5)), 5, 9) == ReadPlan([(5, 9)], [])
    # Aborted while waiting: its finish step is read, the wait ends before it.
    aborted = plan_reads(marks(("arrived", 0), ("aborted", 4)), 0, 4)
    assert aborted == ReadPlan(running=[(4, 4)], waiting=[(0, 3)])
    assert plan_reads(marks(("scheduled", 2)), 0, 9) is None  # no arrival: read everything


def test_frames_read_are_the_runs_the_check_and_steps_without_numbers() -> None:
    plan = ReadPlan(running=[(7, 20), (31, 40)], waiting=[(3, 6), (20, 30)])
    numbers: dict[int, dict[str, Any] | None] = {s: {"gate": "token_budget"} for s in range(41)}
    numbers[25] = None  # a step whose frame has reasons but no numbers
    del numbers[27]  # a step recorded before the table existed
    assert frame_ranges(plan, numbers, 40) == [(3, 3), (7, 22), (25, 25), (27, 27), (31, 40)]


def test_reasons_follow_the_gate() -> None:
    kv = {"gate": "kv_blocks", "head": "r7", "blocks_needed": 3}
    assert reason_at("r7", kv) == "kv_blocks"
    assert reason_at("r8", kv) == "policy_order"
    assert reason_at("r8", {"gate": "max_num_seqs", "head": "r7"}) == "max_num_seqs"
    assert reason_at("r8", {}) == "token_budget"


def test_a_recordings_reader_gives_the_engines_reasons_for_every_gate() -> None:
    """The reasons read back from a step's numbers are those the engine gave (a gate of the
    head alone, kv_watermark among them, leaves the rest in policy order)."""
    from engine.waiting_reasons import waiting_reasons
    from protocol.codes import WaitingReason
    from tests.engine.helpers import make_request, make_scheduler

    scheduler = make_scheduler()
    for i in range(3):
        make_request(scheduler, f"r{i}", 8)
    queue = scheduler.waiting
    for gate in WaitingReason:
        engine = waiting_reasons(queue, gate.value).resolve(["r0", "r1", "r2"])
        detail = {"gate": gate.value, "head": "r0"}
        assert {r: reason_at(r, detail) for r in engine} == engine, gate
