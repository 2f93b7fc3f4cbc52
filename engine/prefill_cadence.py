"""Prefill throttling (vLLM 0.33's `prefill_schedule_interval`, 0.24's
`schedule(throttle_prefills)`): while a decode runs, steps that may not carry prefill skip
running prefill chunks and stop admitting at the first request with prompt left to compute.

The cadence counts executed steps (steps that scheduled tokens): prefill is held until
`interval` of them have passed since the last step that carried prefill. The escape: when
a step that was allowed prefill still left requests waiting (the engine is capacity bound),
throttling stops until an allowed step drains the waiting queue again.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.request import Request
from protocol.wire import WaitingDetail


class PrefillCadence:
    __slots__ = ("capacity_bound", "interval", "last_prefill_step", "num_executed_steps")

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self.last_prefill_step = -interval
        """Executed-step count of the last step that carried prefill (a full interval
        back at the start, so the first step is never held)."""
        self.num_executed_steps = 0
        self.capacity_bound = False

    def defer(self, throttle: bool, running: Iterable[Request]) -> bool:
        """Whether this step carries no prefill. `throttle`: the data-parallel signal."""
        if self.capacity_bound or not (throttle or self.held()):
            return False
        return any(not r.is_prefill_chunk for r in running)

    def held(self) -> bool:
        return (
            self.interval > 1
            and (self.num_executed_steps + 1) - self.last_prefill_step < self.interval
        )

    def steps_held(self) -> int:
        """Executed steps, this one included, before prefill is allowed again."""
        return max(self.last_prefill_step + self.interval - 1 - self.num_executed_steps, 0)

    def throttle_detail(self, step: int) -> WaitingDetail:
        """The numbers behind a prefill_throttled gate at engine step `step`."""
        held = self.steps_held() if self.held() else 0
        return {
            "prefill_schedule_interval": self.interval,
            "steps_held": held,
            "until_step": step + held,
            "throttled_by_coordinator": not held,
        }

    def after_admission(self, num_waiting_left: int) -> None:
        """After the waiting scan of a step that was allowed prefill."""
        self.capacity_bound = num_waiting_left > 0

    def after_step(self, num_scheduled_tokens: int, carried_prefill: bool) -> None:
        if num_scheduled_tokens > 0:
            self.num_executed_steps += 1
        if self.interval > 1 and carried_prefill:
            self.last_prefill_step = self.num_executed_steps
