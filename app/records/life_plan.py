"""Which recorded steps a request's life needs read, and its waiting reasons from the
steps' numbers alone.

A request's marks (arrived, scheduled, preempted, resumed, finished) split its life into
steps it ran (their frames say what it was scheduled, which blocks it got, what it
sampled) and steps it waited. Reading the frames of a long wait is most of the cost (a
frame of a busy step is tens of kilobytes, and one recorded before `waiting_default` holds
every waiting request's reason); but the engine gives every waiting request the same
reason, the step's gate (`waiting_detail.gate`), except under a gate of the queue's head
alone (protocol.codes.HEAD_GATES), where the others wait `policy_order`
(engine.waiting_reasons.waiting_reasons; its frames say so as `waiting_default` and the
exceptions). So the small per-step numbers (step_waits) give the reasons; the first step
of each wait is read from its frame to check that the producer follows that rule, and a
wait is read from frames when it does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.records.life_types import Mark
from protocol.codes import HEAD_GATES, POLICY_ORDER, RequestMark
from protocol.wire import WaitingDetail

LATE_STEPS = 2
"""Steps after a preemption still read: async scheduling applies its in-flight batches."""

Range = tuple[int, int]


@dataclass
class ReadPlan:
    running: list[Range] = field(default_factory=list)
    waiting: list[Range] = field(default_factory=list)


def reason_at(req: str, detail: WaitingDetail) -> str:
    """The reason the engine gives `req`, waiting at a step with these numbers."""
    gate = str(detail.get("gate") or "token_budget")
    if gate in HEAD_GATES:
        return gate if detail.get("head") == req else POLICY_ORDER
    return gate


def plan_reads(marks: list[Mark], first: int, last: int) -> ReadPlan | None:
    """Ran / waited ranges (inclusive) from the marks in seq order; None when the marks
    cannot tell (no arrival), and the caller reads every frame."""
    if not marks or marks[0]["kind"] != RequestMark.ARRIVED:
        return None
    plan = ReadPlan()
    waiting_from: int | None = first
    running_from: int | None = None
    for m in marks:
        kind, step = m["kind"], m["step"]
        if kind in (RequestMark.SCHEDULED, RequestMark.RESUMED) and running_from is None:
            if waiting_from is not None and step > waiting_from:
                plan.waiting.append((waiting_from, step - 1))
            running_from, waiting_from = step, None
        elif kind == RequestMark.PREEMPTED and running_from is not None:
            plan.running.append((running_from, step))
            running_from, waiting_from = None, step  # it waits from this step's end
        elif kind in (RequestMark.FINISHED, RequestMark.ABORTED, RequestMark.REJECTED):
            if running_from is not None:
                plan.running.append((running_from, step))
            elif waiting_from is not None:
                if step > waiting_from:
                    plan.waiting.append((waiting_from, step - 1))
                plan.running.append((step, step))
            running_from = waiting_from = None
    if running_from is not None:
        plan.running.append((running_from, last))
    elif waiting_from is not None and last >= waiting_from:
        plan.waiting.append((waiting_from, last))
    return plan


def merged(ranges: list[Range]) -> list[Range]:
    """Sorted, overlapping or adjacent ranges joined."""
    out: list[Range] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def frame_ranges(plan: ReadPlan, waits: dict[int, WaitingDetail | None], last: int) -> list[Range]:
    """The steps whose frames are read: ran, just after a preemption, the first of each
    wait (the check), and any waited step without numbers."""
    ranges = list(plan.running)
    ranges += [(end + 1, min(end + LATE_STEPS, last)) for _, end in plan.running]
    for a, b in plan.waiting:
        ranges.append((a, a))
        missing = [s for s in range(a, b + 1) if not waits.get(s)]
        ranges += [(s, s) for s in missing]
    return merged([(a, b) for a, b in ranges if a <= b])
