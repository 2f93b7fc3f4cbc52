"""WaitingReasons: the waiting requests' reasons at one step, as a default and its
exceptions (engine.waiting_reasons builds them; the `iteration` frame carries them as
`waiting_default` and `waiting_reasons`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class WaitingReasons:
    """Each waiting request's reason at one step, compactly: `default` for every request
    waiting at that step, except those in `exceptions` (the head under a gate of the head
    alone, requests passed over). Built in O(exceptions), never one entry per waiting
    request: under overload the queue holds tens of thousands. Whoever needs one
    request's reason resolves it (`resolve`) from the requests it knows wait."""

    default: str | None = None
    """None: nobody waited (then `exceptions` is empty too)."""
    exceptions: Mapping[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.default is not None or bool(self.exceptions)

    def resolve(self, waiting: Iterable[str]) -> dict[str, str]:
        """The full map, given the ids of the requests waiting at this step."""
        default, exceptions = self.default, self.exceptions
        if default is None:
            return {r: exceptions[r] for r in waiting if r in exceptions}
        return {r: exceptions.get(r, default) for r in waiting}


NO_WAITING = WaitingReasons()
