"""The request marks of a step (protocol.lifecycle), as our engine and the adapter both
derive them: which marks, in which order, at which time."""

from __future__ import annotations

from protocol.codes import RequestMark
from protocol.frames import request_payload
from protocol.lifecycle import step_marks


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
