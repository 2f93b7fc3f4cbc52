"""The request marks of a step and of a stop (protocol.lifecycle), as our engine and the
adapter both derive them: which marks, in which order, at which time."""

from __future__ import annotations

from protocol.codes import RequestMark
from protocol.frames import request_payload
from protocol.lifecycle import step_marks, stop_marks


def test_marks_of_a_step_in_order_and_time() -> None:
    marks = step_marks(
        7,
        1.5,
        1.75,
        scheduled=["a"],
        resumed=["b"],
        preempted=[("c", 32)],
        first_token=["a"],
        finished=[("d", {"reason": "length", "num_output_tokens": 4})],
    )
    assert [(m.req, m.kind, m.t) for m in marks] == [
        ("a", RequestMark.SCHEDULED, 1.5),
        ("b", RequestMark.RESUMED, 1.5),
        ("c", RequestMark.PREEMPTED, 1.75),
        ("a", RequestMark.FIRST_TOKEN, 1.75),
        ("d", RequestMark.FINISHED, 1.75),
    ]
    assert all(m.step == 7 for m in marks)
    assert marks[2].detail == {"tokens_lost": 32}
    assert request_payload(*marks[4]) == {
        "req": "d",
        "kind": "finished",
        "step": 7,
        "t": 1.75,
        "detail": {"reason": "length", "num_output_tokens": 4},
    }


def test_a_quiet_step_makes_no_marks() -> None:
    empty = step_marks(0, 0.0, 0.0, scheduled=[], resumed=[], preempted=[], first_token=[],
                       finished=[])  # fmt: skip
    assert empty == []


def test_a_stop_aborts_what_is_held_at_the_last_step() -> None:
    held = [("a", {"num_output_tokens": 3}), ("b", {"num_output_tokens": 0})]
    marks = stop_marks(5, 2.25, held)
    assert [(m.req, m.kind, m.step, m.t) for m in marks] == [
        ("a", RequestMark.ABORTED, 4, 2.25),
        ("b", RequestMark.ABORTED, 4, 2.25),
    ]
    assert marks[0].detail == {"num_output_tokens": 3, "reason": "abort"}
    # No step ran yet: the requests end at step 0, where they arrived.
    assert [m.step for m in stop_marks(0, 0.5, held)] == [0, 0]
    assert stop_marks(3, 1.0, []) == []
