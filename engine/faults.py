"""Faults vLLM's own scheduler raises on a configuration it accepts.

vLLM takes some configurations that fail only when a trace reaches a certain state: with
speculative decoding (0.25+), a new decode padded to 1 + K tokens that
`long_prefill_token_threshold` then cuts trips an assertion in `Scheduler.schedule`, and
vLLM's engine stops there. batchscope accepts what vLLM accepts and fails where vLLM fails:
the scheduler raises a `SchedulerAssertion` naming vLLM's check and the step, and whoever
runs the engine reports it (a session event, a simulate result), never a refusal up front.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class SchedulerAssertion(AssertionError):
    """An assertion vLLM's scheduler fails at step `step` (its engine would stop there)."""

    def __init__(self, step: int, assertion: str, detail: str) -> None:
        self.step = step
        self.assertion = assertion
        """vLLM's condition, as its source spells it."""
        self.detail = detail
        """The numbers that broke it, in words."""
        super().__init__(failure_text(self.as_dict()))

    def as_dict(self) -> dict[str, int | str]:
        """The fault as a result or a frame carries it."""
        return {"step": self.step, "assertion": self.assertion, "detail": self.detail}


def failure_text(failure: Mapping[str, Any]) -> str:
    """A run's `failure` (SchedulerAssertion.as_dict) in words."""
    return (
        f"stopped at step {failure['step']} as vLLM's engine would: its scheduler fails "
        f"`assert {failure['assertion']}` ({failure['detail']})"
    )


STOPPED_EXIT = 3
"""Exit status of a CLI run cut short (a step cap, a time limit): never 0, never 2."""


def stopped_text(stopped: dict[str, Any]) -> str:
    """One line for a run cut short: why, where, and how many requests never ended."""
    why = {
        "max_steps": "the step cap (max_steps)",
        "time_limit": "the time limit",
        "failure": "a scheduler failure",
    }.get(str(stopped["reason"]), str(stopped["reason"]))
    return (
        f"incomplete: stopped by {why} at step {stopped['at_step']} with "
        f"{stopped['unfinished']} request(s) unfinished"
    )
