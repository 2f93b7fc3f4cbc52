"""Group the scheduler hooks into engine steps, in whichever loop vLLM runs.

One engine step is one call of vLLM's `EngineCore.step` (sync: schedule, then
update_from_output) or of `step_with_batch_queue` (async scheduling: maybe schedule a
batch, then maybe apply the oldest batch's output). The hooks only see `schedule()` and
`update_from_output()`, so a step is rebuilt as [schedule] [update]: a schedule opens a
step, an update completes the open step (or is a step of its own when the open step
already has one or none is open). A step that only scheduled is known to be complete when
the next hook arrives; `flush()` emits it after a quiet spell (the sender calls it).
Idle loop turns call neither hook and are not steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from batchscope_vllm.rows import Batch
from batchscope_vllm.waiting import Capture


class Arrival(NamedTuple):
    """An `add_request()` call, as its hook takes it."""

    req_id: str
    num_prompt_tokens: int
    max_tokens: int
    priority: int
    t: float
    step: int
    prompt: Any
    """The prompt token ids (a reference; None: a prompt given as embeddings)."""


class ScheduleCall(NamedTuple):
    """A `schedule()` call, as its hook takes it (the sender reads its batch)."""

    so: Any
    step: int
    t_start: float
    t_end: float
    running: int
    waiting: int
    free: int
    preempted: list[tuple[str, int, str]]
    waits: Capture | None


@dataclass(slots=True)
class Scheduled:
    """A `schedule()` call, with what the frame needs computed at once (in hook order)."""

    so: Any
    t_start: float
    t_end: float
    running: int
    waiting: int
    free: int
    preempted: list[tuple[str, int, str]]
    batch: Batch
    waits: Capture | None
    """The waiting queues as schedule() left them (None: not captured)."""

    @property
    def sampling(self) -> dict[str, int]:
        """Tokens each sampling request will produce at most (1 + drafts): placeholders."""
        return self.batch.sampling


@dataclass(slots=True)
class Updated:
    """An `update_from_output()` call (its hook takes it whole)."""

    so: Any
    outputs: Any
    generated: dict[str, int] | None
    """Tokens produced per request whose drafts were verified (before stop trimming)."""
    t_start: float
    t_end: float
    running_end: int
    waiting_end: int
    free_end: int


Hooked = Arrival | ScheduleCall | Updated
"""What a scheduler hook hands the sender thread."""


@dataclass(slots=True)
class Step:
    index: int
    scheduled: Scheduled | None = None
    updated: Updated | None = None
    arrived: list[str] = field(default_factory=list)


class StepAssembler:
    """Turns the ordered hook items into complete steps (see the module docstring)."""

    def __init__(self) -> None:
        self.next_index = 0
        self.open: Step | None = None
        self.batches: dict[int, tuple[int, Scheduled]] = {}
        """id(SchedulerOutput) -> (the step that scheduled it, its schedule record)."""
        self.arrivals: dict[int, list[str]] = {}
        self.in_flight: dict[str, int] = {}
        """Async: output placeholders per request (tokens of batches not yet applied)."""

    def arrival_step(self, req_id: str) -> int:
        """The step a request arriving now is added before."""
        self.arrivals.setdefault(self.next_index, []).append(req_id)
        return self.next_index

    def _open(self) -> Step:
        step = Step(self.next_index, arrived=self.arrivals.pop(self.next_index, []))
        self.next_index += 1
        for old in [k for k in self.arrivals if k < step.index]:
            del self.arrivals[old]
        return step

    def on_schedule(self, rec: Scheduled, track_placeholders: bool) -> list[Step]:
        done = [self.open] if self.open is not None else []
        step = self._open()
        step.scheduled = rec
        self.open = step
        self.batches[id(rec.so)] = (step.index, rec)
        if track_placeholders:
            for req_id, n in rec.sampling.items():
                self.in_flight[req_id] = self.in_flight.get(req_id, 0) + n
        return done

    def on_update(self, rec: Updated) -> list[Step]:
        done: list[Step] = []
        step = self.open
        if step is None or step.updated is not None:
            if step is not None:
                done.append(step)
            step = self._open()
        step.updated = rec
        self.open = None
        done.append(step)
        return done

    def batch_of(self, so: Any) -> tuple[int, Scheduled] | None:
        """Forget and return the batch an update applies (None if its schedule was lost)."""
        return self.batches.pop(id(so), None)

    def applied(self, sched: Scheduled) -> None:
        if not self.in_flight:  # (the sync loop tracks no placeholders)
            return
        for req_id, n in sched.sampling.items():
            left = self.in_flight.get(req_id, 0) - n
            if left > 0:
                self.in_flight[req_id] = left
            else:
                self.in_flight.pop(req_id, None)

    def flush(self) -> list[Step]:
        """The open step, if it only scheduled: the loop went quiet after it."""
        if self.open is None:
            return []
        step, self.open = self.open, None
        return [step]
