"""VirtualClock: the clock of a run that is not timed by the wall (a simulation, a re-run):
session seconds that move only when told. A step on it lasts the runner's modelled time:
the engine advances it by the runner's `forward_ms` while the step runs (engine.engine),
so a step's end, and every mark made there (a first token, a finish), lies after its start
by the step's duration, as on the wall clock of a torch session. Idle gaps are jumps the
caller makes (`jump_to`)."""

from __future__ import annotations


class VirtualClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Time spent by a step's forward pass (its runner's modelled time)."""
        self.now += seconds

    def jump_to(self, t: float) -> None:
        """Idle until `t` (never backwards)."""
        self.now = max(self.now, t)
