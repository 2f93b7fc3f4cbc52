"""The runner seam: execute one step's plan, return sampled tokens. Never touches Request."""

from __future__ import annotations

from typing import Protocol

from engine.outputs import ModelRunnerOutput, SchedulerOutput


class ModelRunner(Protocol):
    name: str
    simulated: bool
    """True when step times are modelled rather than measured."""

    def execute(self, output: SchedulerOutput) -> ModelRunnerOutput: ...

    def describe(self) -> dict[str, object]:
        """Model, device and dtype, for the session record."""
        ...


# Optional: a runner may define `check_token_ids(ids)` raising ValueError for ids it
# cannot embed; the engine then rejects the request with that message.
